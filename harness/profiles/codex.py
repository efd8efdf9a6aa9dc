"""Profile of the OpenAI Codex CLI's auto-review (guardian) and approval behaviour.

Every behaviour and divergence below carries its evidence: the seed chapter's section with
the sentence quoted as written there (the chapter read Codex at its pinned commit
86e17e98c7f9 and the Codex documentation, checked 2026-10-22), what the real CLI was seen
doing under the harness, or an explicit assumption.

Corrected against the seed (issue 27): pending approvals are held by an in-memory channel of
the active turn (§19.1.7), so the profile no longer inherits the reference's durable waits:
a restart loses them (L3.2 and L5.4 diverge, as for OpenCode).

Checked against the real CLI (Codex CLI 0.171.0 under ``--impl cli:codex``; ``compare`` of
``profile:codex@cli`` beside it, ``docs/real-systems.md``): the restart row (a cut call is not
re-run; the resumed thread carries it) and the lost waits are what it did, and now cite that;
what it does with cut or repeated model streams is listed as not modelled, with what it did.
"""

from __future__ import annotations

from harness.profiles.profile import Behaviour, Divergence, Observed, Profile, Source
from reference_impl.denial_counters import DenialPolicy, LimitAction
from reference_impl.policy import RestartAction, RuntimePolicy

BREAKER = Source(
    "seed 004 §19.4.2",
    "官方文档称，同一个 Turn 内连续 3 次拒绝，或最近 50 次审核中累计 10 次拒绝，会中断本轮，"
    "审核的构建、会话和解析失败按“失败即关闭”处理，超时单独呈现，动作同样不会运行")
BREAKER_SOURCE_CODE = Source(
    "seed 004 §19.4.2",
    "源码中的阈值是同样的 3、10、50，但应用服务器的说明写明，只有 circuit_break_action = "
    "\"strict\" 时，TurnAborted 才携带“拒绝过多”的错误，文档没有区分这一点，默认值下的行为"
    "本章没有验证")
DENIED_OR_ABORT = Source(
    "seed 004 §19.4.2",
    "Denied 表示这个动作不要执行，但会话继续，Agent 应当另想办法；Abort 表示 Agent 在用户下"
    "一条指令之前什么都不要做")
IN_MEMORY_WAITS = Source(
    "seed 004 §19.1.7",
    "待决审批通过关联键找到等待答复的通道；这说明“等待”有具体关联对象，但内存中的通道不能证明"
    "重启后仍可重建该等待。")
NO_AUTO_RESUME = Source(
    "seed 004 §19.4.8",
    "Codex：现行的文件级撤销机制；Plan mode 是否有运行时的强制，只在提示词模板里读到“可以执行"
    "不改变状态的动作，不得执行会改变状态的动作”的规则，不能写成沙箱级的保证[29]；进程崩溃后自动"
    "续跑的机制；“恢复不接管旧进程”的直接陈述。")
INTERRUPT_NOTE = Source(
    "seed 004 §19.4.4",
    "被中断的 Turn 会向模型历史写入一条说明：用户有意中断了上一轮，运行中的统一执行进程可能仍在"
    "后台运行，被中止的命令可能已部分执行[22]。")
ESCALATION = Source(
    "seed 004 §19.3.3",
    "文件头的注释还写明，自动审核给出的批准只适用于已审核的授权范围，升级沙箱重试需要对这次重试"
    "重新审核[21]。")

VERSION = "Codex CLI 0.171.0"
CUT_CALL_KEPT = Observed(
    VERSION, "l4-crash-after-tool-returned",
    "lifecycle-harness replay l4/crash_after_tool_returned.toml --seed 0 --impl cli:codex",
    "SIGKILL after the tool ran, before its result reached Codex, then a new `codex "
    "app-server` and `thread/resume`: the call is not run again (one ledger row) and the "
    "resumed thread carries it with the output 'aborted' (L4.3 passes from outside, as the "
    "profile's does)")
WAIT_LOST = Observed(
    VERSION, "l3-answer-neighbours.approve-true.timing-after-restart",
    "lifecycle-harness replay l3/answer_neighbours.toml --variant "
    "approve-true.timing-after-restart --seed 0 --impl cli:codex",
    "the app-server stopped with an approval request open, then `thread/resume`: the resumed "
    "thread carries the call with the output 'aborted by user' and a <turn_aborted> note (the "
    "user interrupted the previous turn; aborted commands may have partly run), and the "
    "owner's approval given afterwards reaches nothing (the tool never runs)")
STREAM_RETRIED = Observed(
    VERSION, "m-transport-error",
    "lifecycle-harness replay m/transport_error.toml --seed 0 --impl cli:codex",
    "a transport error (TCP reset) of the model stream is retried with the same request "
    "(Codex's stream retries) and the turn ends normally: the error is swallowed (M3, M4 fail)")
UNFINISHED_CALL_RUN = Observed(
    VERSION, "m-unfinished-stream-calls.ending-eof.then-next_turn.answer-text",
    "lifecycle-harness replay m/unfinished_stream_calls.toml --variant "
    "ending-eof.then-next_turn.answer-text --seed 0 --impl cli:codex",
    "a function_call whose response.output_item.done arrived runs although "
    "response.completed never did, then the request is sent again (M5, M4 fail)")
DUPLICATE_RUN = Observed(
    VERSION, "x-duplicate-delivery-one-record",
    "lifecycle-harness replay x/duplicate_delivery_one_record.toml --seed 0 --impl cli:codex",
    "the same tool call delivered twice by the model runs twice (L1.8, M4 fail)")

CODEX = Profile(
    name="codex",
    cli="codex",
    system="OpenAI Codex CLI",
    summary="auto-review circuit breaker (3 consecutive / 10 of the last 50) interrupts the "
            "turn; pending approvals in memory",
    policy=RuntimePolicy(
        denials=DenialPolicy(
            with_owner=LimitAction.END_TURN,
            without_owner=LimitAction.END_TURN,
            cumulative_window_reviews=50,
            cumulative_denials_max=10,
        ),
        incomplete_calls_on_restart=RestartAction.MARK_UNKNOWN,
        waits_survive_restart=False,
    ),
    behaviours=(
        Behaviour(
            "denial limit",
            "auto-review circuit breaker: 3 consecutive denials in a turn, or 10 among the "
            "last 50 reviews, interrupt the turn (TurnAborted) instead of handing the action "
            "to the owner; build, session and parse failures of a review are fail-closed and "
            "timeouts are shown apart, so neither counts as a denial. Policy: "
            "DenialPolicy(END_TURN, END_TURN, window 50, max 10)",
            (BREAKER, BREAKER_SOURCE_CODE),
            assumption="no reset of the counts by a trip is documented, so only an allowed "
                       "review ends a streak",
        ),
        Behaviour(
            "restart",
            "a tool call cut by a crash is not re-run: the reference's marking (unknown, "
            "reconciliation required) stands, the closest to Codex's note that an aborted "
            "command may already have partly run. Policy: RestartAction.MARK_UNKNOWN",
            (INTERRUPT_NOTE, NO_AUTO_RESUME),
            observed=(CUT_CALL_KEPT,),
        ),
        Behaviour(
            "pending waits",
            "a pending approval is an in-memory channel of the active turn: nothing shows it "
            "can be rebuilt after a restart, so a restart loses it (the operation is refused, "
            "the turn goes on). Policy: waits_survive_restart=False",
            (IN_MEMORY_WAITS,),
            observed=(WAIT_LOST,),
        ),
        Behaviour(
            "classifier",
            "auto-review is Codex's classifier: a Denied review is handed back to the model "
            "and the session goes on; the reference's classifier path is kept",
            (DENIED_OR_ABORT, BREAKER),
        ),
    ),
    not_modelled=(
        Behaviour(
            "not modelled",
            "the circuit_break_action = \"strict\" distinction (unverified under defaults) and "
            "the 900-token truncation of refusal texts; escalation approval scope (the "
            "reference's escalation wait already has its own id)",
            (BREAKER_SOURCE_CODE, ESCALATION),
        ),
        Behaviour(
            "not modelled",
            "the model stream and tool-call delivery: Codex retries a failed stream, runs a "
            "function call of an unfinished response and runs a call delivered twice; the "
            "profile keeps the reference's model layer, so M3, M4, M5 and L1.8 pass in the "
            "profile and fail for the real CLI (compare profile:codex@cli beside cli:codex)",
            observed=(STREAM_RETRIED, UNFINISHED_CALL_RUN, DUPLICATE_RUN),
        ),
    ),
    divergences=(
        Divergence(
            "L3.1",
            "the auto-review circuit breaker interrupts the turn at the 3rd consecutive denial "
            "(or the 10th of the last 50 reviews) instead of sending the next action to the "
            "owner, so the fallback to manual approval never happens (not exercised)",
            (BREAKER,),
        ),
        Divergence(
            "L3.5",
            "the breaker counts denials in a window of the last 50 reviews (10 of them trip it), "
            "not by the session's thresholds and reset rules: after a cumulative count the "
            "reset rules expect to send the next action to the owner, it goes to the reviewer "
            "again (seen on a generated workload, regression-generated-f9c38200e1)",
            (BREAKER,),
        ),
        Divergence(
            "L3.3",
            "in a non-interactive session the breaker ends the turn too (TurnAborted): the "
            "denial that trips it is not handed back to the model and the loop does not go on "
            "with other work",
            (BREAKER,),
        ),
        Divergence(
            "L3.2",
            "pending approvals live in an in-memory channel of the active turn: after a "
            "restart the wait is gone (refused), not pending and answerable",
            (IN_MEMORY_WAITS,),
            observed=(WAIT_LOST,),
        ),
        Divergence(
            "L5.4",
            "after a restart the lost wait's operation is shown refused, while the owner's "
            "view of the world still has the prompt open (approve / reject)",
            (IN_MEMORY_WAITS,),
        ),
    ),
)
