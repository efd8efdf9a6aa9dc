"""Profile of OpenCode 2.x's execution claim, restart resumption and permission requests.

Every behaviour and divergence below carries its evidence: the seed chapter's section with
the sentence quoted as written there (the chapter read sst/opencode at its pinned commit
c93aaae37157, package 2.1.2, and the OpenCode documentation, checked 2026-10-22 — source
facts, not documented promises), what the real CLI was seen doing under the harness, or an
explicit assumption.

Corrected against the seed (issue 27):

* a restart does not re-run the tool calls that were running: they are marked failed,
  "Tool execution interrupted", at the start of the next drain, and the turn is resumed with
  a synthetic message; only the model may issue the call again (§19.4.4). The previous rows
  (re-run, at-least-once, L1.7/L1.8/L2.9/L4.10/X1) modelled the resumed *turn*'s
  at-least-once note as a re-run of the *call*, which the seed does not say;
* OpenCode has no classifier: its permission evaluation is rules (deny, then saved
  approvals, then ask, else allow) and plugin hooks (§19.3.3). The profile no longer
  inherits the reference's classifier: the criteria about classifier outcomes and denial
  counters (L2.5, L2.6, L2.8, L3.5-L3.9) are n/a with that reason instead of passed. L3.1
  and L2.2 are not n/a: the harness's auto sessions still happen, OpenCode's ask path
  decides them, and those criteria judge (and fail) the waits and decisions it makes.

Checked against the real CLI (OpenCode 1.18.33 under ``--impl cli:opencode``: its one full
run of the applicable scenarios and the replays below; ``compare`` of ``profile:opencode@cli``
beside it, ``docs/real-systems.md``): the restart row (a cut call is not re-run and is handed
back as interrupted) and the lost waits are what it did, and now cite that; a plain reject
ending the turn, the rewriting of calls to a tool every rule denies and what it does with
cut or repeated model streams are listed as not modelled, with what it did.
"""

from __future__ import annotations

from harness.profiles.profile import (
    Behaviour,
    Divergence,
    Inapplicable,
    Observed,
    Profile,
    Source,
)
from reference_impl.policy import RestartAction, RuntimePolicy

INTERRUPTED = Source(
    "seed 004 §19.4.4",
    "被中断的步骤与工具作为 aborted 错误写进助手消息，仍处于流式或运行中的工具调用，会在下一次 "
    "drain 开头被统一标记为失败：“Tool execution interrupted”[72]。")
RESTART = Source(
    "seed 004 §19.4.4",
    "进程崩溃、SIGKILL 和优雅重启在数据库里留下相同的特征，启动时由重启续跑逻辑接手，并注入一条"
    "合成消息：“The server restarted while you were working. Continue from where you left "
    "off without repeating completed work.”[71]。")
CLAIM = Source(
    "seed 004 §19.4.4",
    "开始执行时，Started 事件和执行声明（claim）在同一个事务里写入；成功、失败和用户中断释放声明，"
    "关停引起的中断保留声明。")
RESTART_LIMIT = Source(
    "seed 004 §19.4.4",
    "每个回合最多续跑 10 次，次数持久保存、只被终态事件重置，超过后以失败终结")
IN_MEMORY_WAITS = Source(
    "seed 004 §19.4.8",
    "重启后待处理的权限请求是否保留，源码里只见内存中的映射，位置关闭时会被取消")
EVALUATION = Source(
    "seed 004 §19.3.3",
    "OpenCode 的求值写在 permission.ts 里：先取该 Agent 与会话的规则；只要任一资源命中 deny 就直接 "
    "deny，已保存的批准不参与；否则合并已保存的批准，任一资源为 ask 则 ask，否则 allow；最后触发"
    "插件的 permission.evaluate 钩子，Policies 就是在这一步生效的[75]。")
ASK = Source(
    "seed 004 §19.3.3",
    "规则为 ask 时，工具调用以 Deferred 挂起，客户端用 once、always 或 reject 回复")
RUN_REJECTS = Source(
    "seed 004 §19.4.2",
    "非交互的 opencode run 在没有人可以批准时，默认自动拒绝并附上反馈，让模型“不要这个动作，继续”")

VERSION = "OpenCode 1.18.33"
CUT_CALL_INTERRUPTED = Observed(
    VERSION, "l4-crash-after-tool-returned",
    "lifecycle-harness replay l4/crash_after_tool_returned.toml --seed 0 --impl cli:opencode",
    "SIGKILL after the tool ran, before its result reached OpenCode, then a new `opencode "
    "serve` and the session prompted again: the call is not run again (one ledger row) and "
    "the next request carries it with the output '[Tool execution was interrupted]' (L4.3 "
    "passes from outside, as the profile's does)")
WAIT_LOST = Observed(
    VERSION, "l3-answer-neighbours.approve-true.timing-after-restart",
    "lifecycle-harness replay l3/answer_neighbours.toml --variant "
    "approve-true.timing-after-restart --seed 0 --impl cli:opencode",
    "the server stopped with a permission request open, then a new `opencode serve`: the "
    "owner's approval given afterwards reaches nothing (the question lived in the stopped "
    "server's memory; the tool never runs)")
REJECT_ENDS_TURN = Observed(
    VERSION, "l3-answer-neighbours.approve-false.timing-at-once",
    "lifecycle-harness replay l3/answer_neighbours.toml --variant "
    "approve-false.timing-at-once --seed 0 --impl cli:opencode",
    "the owner's plain `reject` of a permission request ends the turn: nothing runs and no "
    "later request tells the model (X3 fails; a reject with a message, or "
    "experimental.continue_loop_on_deny, would go on)")
DENIED_TOOL_REWRITTEN = Observed(
    VERSION, "regression-generated-05344acd44",
    "lifecycle-harness replay regressions/regression-generated-05344acd44.toml --seed 0 "
    "--impl cli:opencode",
    "in a session nobody can be asked in, with no rule allowing the tool, OpenCode leaves "
    "`bash` out of the tools it offers and, when the model calls it anyway, rewrites the "
    "model's call in its history as a call of its `invalid` tool (M5 fails)")
STREAM_RETRIED = Observed(
    VERSION, "m-transport-error",
    "lifecycle-harness replay m/transport_error.toml --seed 0 --impl cli:opencode",
    "a transport error (TCP reset) of the model stream is retried and the turn ends "
    "normally: the error is swallowed (M3, M4 fail)")
UNFINISHED_CALL_RUN = Observed(
    VERSION, "m-unfinished-stream-calls.ending-eof.then-next_turn.answer-text",
    "lifecycle-harness replay m/unfinished_stream_calls.toml --variant "
    "ending-eof.then-next_turn.answer-text --seed 0 --impl cli:opencode",
    "a tool call of a stream cut by EOF before its finish_reason runs as if the answer had "
    "completed, then the request is sent again (M5, M4 fail)")
DUPLICATE_RUN = Observed(
    VERSION, "x-duplicate-delivery-one-record",
    "lifecycle-harness replay x/duplicate_delivery_one_record.toml --seed 0 --impl cli:opencode",
    "the same tool call delivered twice by the model runs twice (L1.8, M4 fail)")

NO_CLASSIFIER = ("OpenCode has no classifier (its evaluation is rules, saved approvals and "
                 "plugin hooks): no classifier review happens, so {what}")

OPENCODE = Profile(
    name="opencode",
    cli="opencode",
    system="OpenCode 2.x (service mode)",
    summary="a restart marks running tool calls failed ('Tool execution interrupted') and "
            "resumes the turn; no classifier; pending waits in memory",
    policy=RuntimePolicy(
        incomplete_calls_on_restart=RestartAction.MARK_FAILED,
        waits_survive_restart=False,
        classifier=False,
    ),
    behaviours=(
        Behaviour(
            "restart",
            "the execution claim is written with the Started event in one transaction (the "
            "reference's start record); on restart a tool call still running is marked "
            "failed, 'Tool execution interrupted', and the turn is resumed: the model sees "
            "that result and alone may issue the call again. Policy: "
            "RestartAction.MARK_FAILED",
            (CLAIM, INTERRUPTED, RESTART),
            observed=(CUT_CALL_INTERRUPTED,),
        ),
        Behaviour(
            "pending waits",
            "pending permission requests live in an in-memory map and are cancelled when "
            "their location closes: a restart loses them (the operation is refused, the turn "
            "goes on). Policy: waits_survive_restart=False",
            (IN_MEMORY_WAITS,),
            observed=(WAIT_LOST,),
        ),
        Behaviour(
            "classifier",
            "no classifier: an operation no rule decides in the harness's auto mode takes "
            "OpenCode's ask path (a Deferred request an interactive owner answers; `opencode "
            "run` with nobody to approve rejects it and the model goes on). Policy: "
            "classifier=False",
            (EVALUATION, ASK, RUN_REJECTS),
            assumption="the harness's auto mode has no OpenCode counterpart; it is modelled "
                       "as an `ask` rule for what no other rule decides, not as OpenCode's "
                       "default `allow`",
        ),
        Behaviour(
            "denial limit",
            "no classifier, hence no classifier denials to count and no fallback",
            (EVALUATION,),
        ),
    ),
    not_modelled=(
        Behaviour(
            "not modelled",
            "the persisted limit of 10 resumptions per turn (no scenario restarts that "
            "often) and the resumption being installed only in service mode",
            (RESTART_LIMIT,),
        ),
        Behaviour(
            "not modelled",
            "an owner's refusal: OpenCode's plain reject ends the turn without telling the "
            "model; the profile keeps the reference's refusal (the model is told, the turn "
            "goes on), so X3 passes there in the profile and fails for the real CLI",
            (ASK,),
            observed=(REJECT_ENDS_TURN,),
        ),
        Behaviour(
            "not modelled",
            "a tool every rule denies is left out of the offered tools and a call of it is "
            "rewritten in the history; the profile refuses the call and keeps it as made",
            observed=(DENIED_TOOL_REWRITTEN,),
        ),
        Behaviour(
            "not modelled",
            "the model stream and tool-call delivery: OpenCode retries a failed stream, runs a "
            "tool call of an unfinished stream and runs a call delivered twice; the profile "
            "keeps the reference's model layer, so M3, M4, M5 and L1.8 pass in the profile "
            "and fail for the real CLI (compare profile:opencode@cli beside cli:opencode)",
            observed=(STREAM_RETRIED, UNFINISHED_CALL_RUN, DUPLICATE_RUN),
        ),
    ),
    divergences=(
        Divergence(
            "L4.3",
            "a call whose start was recorded and whose result was not saved is marked failed "
            "('Tool execution interrupted') on restart instead of unknown with "
            "reconciliation required",
            (INTERRUPTED,),
        ),
        Divergence(
            "L4.9",
            "the interrupted call's possible effect is reported as a definite failure, not as "
            "an effect the runtime cannot confirm (unknown)",
            (INTERRUPTED,),
        ),
        Divergence(
            "X1",
            "the interrupted call's outcome 'failed' does not answer 'did it run': a crash "
            "right after the start record, before the tool ran, is recorded failed too",
            (INTERRUPTED,),
        ),
        Divergence(
            "L1.7",
            "a call whose result a crash left unknown is stored as a definite failure "
            "without reconciliation",
            (INTERRUPTED,),
        ),
        Divergence(
            "L4.7",
            "the result record of the interrupted call says failed with the interruption text "
            "while the tool had run and returned its own result (the ledger's)",
            (INTERRUPTED,),
        ),
        Divergence(
            "L5.5",
            "the result event of the interrupted call says failed where the world says the "
            "outcome is unknown (or that the tool never ran)",
            (INTERRUPTED,),
        ),
        Divergence(
            "L3.2",
            "pending permission requests live in an in-memory map: after a restart the wait is "
            "gone (refused), not pending and answerable",
            (IN_MEMORY_WAITS,),
            observed=(WAIT_LOST,),
        ),
        Divergence(
            "L5.4",
            "after a restart the lost wait's operation is shown refused while the owner's "
            "view still has the prompt open, and the interrupted call is shown failed (edit "
            "the arguments) where it needs reconciliation",
            (IN_MEMORY_WAITS, INTERRUPTED),
        ),
        Divergence(
            "L2.2",
            "no classifier reviews anything: an auto-mode Bash call is decided by the rules' "
            "ask path (asked, or refused when nobody can answer) without a full-operation "
            "review",
            (EVALUATION,),
        ),
        Divergence(
            "L3.1",
            "with no classifier, what no rule decides in an auto session goes to the owner at "
            "once (OpenCode's ask), which this criterion reads as a fallback to manual "
            "approval before any denial threshold",
            (EVALUATION, ASK),
            assumption="the harness's auto mode is modelled as OpenCode's ask path (see the "
                       "classifier behaviour); the L3.1 premise, a classifier's denials, does "
                       "not exist in OpenCode, but the waits it sees are judged",
        ),
    ),
    not_applicable=tuple(
        Inapplicable(criterion, NO_CLASSIFIER.format(what=what), (EVALUATION,))
        for criterion, what in (
            ("L2.5", "no classifier outcome (timeout, failure, cancellation, risk denial) is "
                     "ever recorded"),
            ("L2.6", "no execution can be registered before a review verdict"),
            ("L2.8", "no verdict can be voided by a rule change during a review"),
            ("L3.5", "there are no classifier denial counters to reset"),
            ("L3.6", "there are no classifier denial counters to isolate"),
            ("L3.7", "no classifier risk denial is counted"),
            ("L3.8", "no classifier fault can happen"),
            ("L3.9", "no classifier risk denial can be told from an execution failure"),
        )
    ),
)
