"""Profiles of Claude Code's auto mode (classifier) and its ``-p`` non-interactive mode.

Claude Code's core is not published: the seed chapter reads only its official documentation
(checked 2026-10-22), and so does this profile. Every behaviour and divergence carries the
seed's section with the sentence quoted as written there, or an explicit assumption.

Corrected against the seed (issue 27): in ``-p`` mode "the blocked action does not run, but
Claude goes on instead of stopping the whole run" (§19.4.2). The previous rows had ``-p``
abort the run after repeated blocks; nothing supports that. ``claude-code`` is therefore the
reference's policy itself (the seed's design adopted Claude Code's documented fallback), and
``claude-code-print`` differs only in having nobody to prompt in any session.
"""

from __future__ import annotations

from harness.profiles.profile import Behaviour, Divergence, Profile, Source
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
RESET_ASSUMPTION = (
    "the seed's chapter states the 3 / 20 thresholds but not which events reset the counts "
    "or that classifier outages are not blocks: the reference's rules (an allowed action "
    "resets the consecutive count; the total resets when its own limit's approval completes; "
    "outages count for nothing) are kept as they are")


def _behaviours(denial_limit: Behaviour) -> tuple[Behaviour, ...]:
    return (
        denial_limit,
        Behaviour(
            "restart",
            "a tool call cut by the end of the process is neither completed nor re-run on "
            "resume; Claude is told to check whether it took effect: the reference's marking "
            "(unknown, reconciliation required). Policy: RestartAction.MARK_UNKNOWN",
            (RESUME,),
        ),
        Behaviour(
            "pending waits",
            "pending approval waits survive a restart, as the reference's do",
            (NO_WAIT_EVIDENCE,),
            assumption="the seed says public evidence is not enough to infer Claude Code's "
                       "waiting object; the reference's durable waits are kept unverified, "
                       "so the L3.2 and L5.4 rows show the reference, not Claude Code",
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
            "block stands and Claude goes on (the reference's own policy)",
    policy=RuntimePolicy(
        denials=DenialPolicy(with_owner=LimitAction.ASK_OWNER,
                             without_owner=LimitAction.KEEP_REVIEWING),
        incomplete_calls_on_restart=RestartAction.MARK_UNKNOWN,
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
    not_modelled=(
        Behaviour(
            "not modelled",
            "-p without auto mode denies every action that would need an approval (Manual "
            "default): the harness's non-interactive sessions already get no waits",
            (PRINT_MANUAL,),
        ),
    ),
    divergences=(),
)

CLAUDE_CODE_PRINT = Profile(
    name="claude-code-print",
    cli="claude-code",
    system="Claude Code in -p (print) mode",
    summary="every session as `claude -p`: nobody to prompt, so repeated classifier blocks "
            "never fall back to an owner; each block stands and Claude goes on",
    policy=RuntimePolicy(
        denials=DenialPolicy(with_owner=LimitAction.KEEP_REVIEWING,
                             without_owner=LimitAction.KEEP_REVIEWING),
        incomplete_calls_on_restart=RestartAction.MARK_UNKNOWN,
    ),
    behaviours=_behaviours(Behaviour(
        "denial limit",
        "as `claude -p` in every session: there is nobody to ask, so past 3 consecutive or "
        "20 total blocks the classifier keeps deciding; a blocked action does not run and "
        "Claude goes on. Policy: DenialPolicy(KEEP_REVIEWING, KEEP_REVIEWING)",
        (FALLBACK,),
        assumption=RESET_ASSUMPTION,
    )),
    not_modelled=(
        Behaviour(
            "not modelled",
            "-p without auto mode denies every action that would need an approval (Manual "
            "default); the approvals a scenario scripts for its interactive sessions are "
            "still answered, so this profile shows the denial-limit rule of -p alone",
            (PRINT_MANUAL,),
        ),
    ),
    divergences=(
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
