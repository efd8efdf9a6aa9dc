"""Profiles of Claude Code's auto mode (classifier) and its ``-p`` non-interactive mode.

Claude Code's core is not published: the seed chapter reads only its official documentation
(checked 2026-10-22), and so does this profile. Every behaviour and divergence carries the
seed's section with the sentence quoted as written there, what the real CLI was seen doing
under the harness, or an explicit assumption.

Corrected against the seed (issue 27): in ``-p`` mode "the blocked action does not run, but
Claude goes on instead of stopping the whole run" (§19.4.2). The previous rows had ``-p``
abort the run after repeated blocks; nothing supports that. ``claude-code``'s denial policy is
therefore the reference's own (the seed's design adopted Claude Code's documented fallback),
and ``claude-code-print`` differs only in having nobody to prompt in any session.

Corrected against the real CLI (Claude Code 2.1.197 under ``--impl cli:claude-code``, the
driver's ``claude -p`` with stream-json; ``compare`` of ``profile:claude-code@cli`` beside it,
``docs/real-systems.md``): a pending approval does not survive a restart (an answer after
``--continue`` reaches nothing), so both profiles lose their waits at a restart (L3.2 and L5.4
diverge), where the previous row kept the reference's durable waits as an assumption; and
``--continue`` drops a tool call the kill cut off instead of telling Claude to check it, which
the seed's sentence says (kept as what the docs claimed; the policy seams cannot drop a call,
so the profile still marks it unknown and its L4.3 passes where the real CLI's fails). What the
real CLI does with cut or repeated model streams is listed as not modelled, with what it did.
"""

from __future__ import annotations

from harness.profiles.profile import Behaviour, Divergence, Observed, Profile, Source
from reference_impl.denial_counters import DenialPolicy, LimitAction
from reference_impl.policy import RestartAction, RuntimePolicy

FALLBACK = Source(
    "seed 004 §19.4.2",
    "连续被拦截 3 次或累计 20 次，auto 模式暂停并退回逐次询问，阈值不可配置；-p 下没有可询问的对象，"
    "被拦截的动作不运行，但 Claude 继续而不是停止整个运行[34]。")
DENIAL_REASON = Source(
    "seed 004 §19.4.2",
    "auto 模式下被分类器拦截的动作会列入 /permissions 的“最近拒绝”，可以按 r 手动批准后重试；"
    "Claude 会收到拒绝的原因。")
RESUME = Source(
    "seed 004 §19.4.4",
    "恢复时仍在运行、被进程结束打断的工具调用既不会完成也不会重跑，Claude 会看到“被截断”的标记，"
    "并被告知先检查它是否已经生效（除非设置了 CLAUDE_CODE_RESUME_INTERRUPTED_TURN）")
NO_WAIT_EVIDENCE = Source(
    "seed 004 §19.3.3",
    "Claude Code 的公开资料描述规则、Hook 与分类器的裁决行为，但不足以据此推断其内部等待对象。")
PRINT_MANUAL = Source(
    "seed 004 §19.2.3",
    "claude -p 与 Agent SDK 在没有指定模式时，v2.1.302 及以后默认为 Manual，调用需要审批的动作会"
    "被拒绝，除非规则或 Hook 允许[34]。")
VERSION = "Claude Code 2.1.197"
DROPS_CUT_CALL = Observed(
    VERSION, "l4-crash-after-tool-returned",
    "lifecycle-harness replay l4/crash_after_tool_returned.toml --seed 0 --impl cli:claude-code",
    "SIGKILL after the tool ran, before its result reached Claude Code, then `claude -p "
    "--continue`: the call is not run again (one ledger row), but the resumed conversation no "
    "longer carries it, so the model is never told the command ran or may have (L4.3 fails "
    "from outside in all 6 such scenarios), and an assistant message 'No response requested.' "
    "the model never gave is inserted (M5)")
WAIT_LOST = Observed(
    VERSION, "l3-answer-neighbours.approve-true.timing-after-restart",
    "lifecycle-harness replay l3/answer_neighbours.toml --variant "
    "approve-true.timing-after-restart --seed 0 --impl cli:claude-code",
    "the session stopped with an approval prompt open, then `claude -p --continue`: the "
    "resumed turn ends without the call, and the owner's approval given afterwards reaches "
    "nothing (the driver's answer finds no question; the tool never runs): the pending "
    "approval lived in the stopped process's memory")
STREAM_RETRIED = Observed(
    VERSION, "m-transport-error",
    "lifecycle-harness replay m/transport_error.toml --seed 0 --impl cli:claude-code",
    "a transport error (TCP reset) of the model stream is retried with the same request and "
    "the turn ends normally: the error is swallowed (M3, M4 fail)")
UNFINISHED_CALL_RUN = Observed(
    VERSION, "m-unfinished-stream-calls.ending-eof.then-next_turn.answer-text",
    "lifecycle-harness replay m/unfinished_stream_calls.toml --variant "
    "ending-eof.then-next_turn.answer-text --seed 0 --impl cli:claude-code",
    "a stream cut by EOF after a complete tool_use block, before message_stop: the call runs "
    "as if the answer had completed, then the request is sent again (M5, M4 fail)")
DUPLICATE_RUN = Observed(
    VERSION, "x-duplicate-delivery-one-record",
    "lifecycle-harness replay x/duplicate_delivery_one_record.toml --seed 0 --impl cli:claude-code",
    "the same tool call delivered twice by the model runs twice (L1.8, M4 fail)")
RESET_ASSUMPTION = (
    "the seed's chapter states the 3 / 20 thresholds but not which events reset the counts "
    "or that classifier outages are not blocks: the reference's rules (an allowed action "
    "resets the consecutive count; the total resets when its own limit's approval completes; "
    "outages count for nothing) are kept as they are")


def _not_modelled(manual: Behaviour) -> tuple[Behaviour, ...]:
    return (
        manual,
        Behaviour(
            "not modelled",
            "the model stream and tool-call delivery: Claude Code retries a failed stream, runs "
            "a tool call of an unfinished stream and runs a call delivered twice; the profile "
            "keeps the reference's model layer, so M3, M4, M5 and L1.8 pass in the profile and "
            "fail for the real CLI (compare profile:claude-code@cli beside cli:claude-code)",
            observed=(STREAM_RETRIED, UNFINISHED_CALL_RUN, DUPLICATE_RUN),
        ),
    )


def _waits_lost() -> tuple[Divergence, ...]:
    return (
        Divergence(
            "L3.2",
            "pending approvals live in the CLI process's memory: after a restart the wait is "
            "gone (refused), not pending and answerable",
            observed=(WAIT_LOST,),
        ),
        Divergence(
            "L5.4",
            "after a restart the lost wait's operation is shown refused, while the owner's "
            "view of the world still has the prompt open (approve / reject)",
            observed=(WAIT_LOST,),
        ),
    )


def _behaviours(denial_limit: Behaviour) -> tuple[Behaviour, ...]:
    return (
        denial_limit,
        Behaviour(
            "restart",
            "a tool call cut by the end of the process is not re-run on resume (observed and "
            "documented alike); the docs say Claude is then told to check whether it took "
            "effect, but `claude -p --continue` drops the call from the conversation. The "
            "policy seams cannot drop a call: the profile keeps the reference's marking "
            "(unknown, reconciliation required), the nearest that never re-runs, so its L4.3 "
            "passes where the real CLI's fails. Policy: RestartAction.MARK_UNKNOWN",
            observed=(DROPS_CUT_CALL,),
            docs_claimed=(RESUME,),
        ),
        Behaviour(
            "pending waits",
            "a pending approval lives in the CLI process's memory: a restart loses it (the "
            "operation is refused, the turn goes on). Policy: waits_survive_restart=False",
            (NO_WAIT_EVIDENCE,),
            observed=(WAIT_LOST,),
        ),
        Behaviour(
            "classifier",
            "auto mode reviews an action with a classifier before it runs; a blocked action "
            "does not run and its reason reaches Claude",
            (DENIAL_REASON, FALLBACK),
        ),
    )


CLAUDE_CODE = Profile(
    name="claude-code",
    cli="claude-code",
    system="Claude Code (auto mode; -p for non-interactive sessions)",
    summary="3 consecutive / 20 total classifier blocks fall back to prompting; in -p the "
            "block stands and Claude goes on (the reference's denial policy); pending "
            "approvals in memory (observed)",
    policy=RuntimePolicy(
        denials=DenialPolicy(with_owner=LimitAction.ASK_OWNER,
                             without_owner=LimitAction.KEEP_REVIEWING),
        incomplete_calls_on_restart=RestartAction.MARK_UNKNOWN,
        waits_survive_restart=False,
    ),
    behaviours=_behaviours(Behaviour(
        "denial limit",
        "after 3 consecutive or 20 total classifier blocks auto mode pauses and falls back to "
        "prompting for each action (thresholds not configurable); in -p (the harness's "
        "non-interactive sessions) there is nobody to ask: the blocked action does not run "
        "and Claude goes on. Policy: DenialPolicy(ASK_OWNER, KEEP_REVIEWING), the reference's",
        (FALLBACK,),
        assumption=RESET_ASSUMPTION,
    )),
    not_modelled=_not_modelled(Behaviour(
        "not modelled",
        "-p without auto mode denies every action that would need an approval (Manual "
        "default): the harness's non-interactive sessions already get no waits",
        (PRINT_MANUAL,),
    )),
    divergences=_waits_lost(),
)

CLAUDE_CODE_PRINT = Profile(
    name="claude-code-print",
    cli="claude-code",
    system="Claude Code in -p (print) mode",
    summary="every session as `claude -p`: nobody to prompt, so repeated classifier blocks "
            "never fall back to an owner; each block stands and Claude goes on; pending "
            "approvals in memory (observed)",
    policy=RuntimePolicy(
        denials=DenialPolicy(with_owner=LimitAction.KEEP_REVIEWING,
                             without_owner=LimitAction.KEEP_REVIEWING),
        incomplete_calls_on_restart=RestartAction.MARK_UNKNOWN,
        waits_survive_restart=False,
    ),
    behaviours=_behaviours(Behaviour(
        "denial limit",
        "as `claude -p` in every session: there is nobody to ask, so past 3 consecutive or "
        "20 total blocks the classifier keeps deciding; a blocked action does not run and "
        "Claude goes on. Policy: DenialPolicy(KEEP_REVIEWING, KEEP_REVIEWING)",
        (FALLBACK,),
        assumption=RESET_ASSUMPTION,
    )),
    not_modelled=_not_modelled(Behaviour(
        "not modelled",
        "-p without auto mode denies every action that would need an approval (Manual "
        "default); the approvals a scenario scripts for its interactive sessions are "
        "still answered, so this profile shows the denial-limit rule of -p alone",
        (PRINT_MANUAL,),
    )),
    divergences=(
        *_waits_lost(),
        Divergence(
            "L3.1",
            "as `claude -p` there is nobody to prompt: after 3 consecutive (or 20) blocks the "
            "classifier keeps deciding and no later action goes to the owner, so the fallback "
            "to manual approval never happens",
            (FALLBACK,),
        ),
        Divergence(
            "L3.5",
            "the same missing fallback, where the streak that reached the threshold was "
            "followed by an allowed review or a cumulative count: the harness's counter model "
            "expects the next action at the owner and finds it at the classifier, which it "
            "reads against the reset rules",
            (FALLBACK,),
        ),
        Divergence(
            "L3.8",
            "the same missing fallback, where a classifier fault sat in the streak: the "
            "next action goes to the classifier, which the harness reads as the fault having "
            "changed the counts",
            (FALLBACK,),
        ),
    ),
)
