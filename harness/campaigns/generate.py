"""Generation campaigns: whole workloads built by the harness, judged by the oracles.

Hand-written scenarios cover the situations someone thought of. A generation campaign builds
its cases itself from the workload vocabulary (:mod:`harness.campaigns.workloads`), runs each
against the implementation under test and lets every criterion judge it (FoundationDB's
simulator and TigerBeetle's VOPR work the same way). Guarantees of :func:`run_generation`:

* **Deterministic per seed.** Cases come in *chunks* of :data:`CHUNK` workloads; chunk ``k`` is
  what Hypothesis draws under the seed :func:`chunk_seed` ``(seed, k)`` (example database off,
  no deadline, health checks off) from the ``k``-th entry of the schedule (:func:`chunk_plan`:
  the swarm or one family, in turn), and every case runs with the campaign seed as its run seed.
  So the same seed gives the same cases in the same order and the same trace digests, with
  one job or many, and a ``--time-s`` campaign is a prefix of a ``--budget`` one.
* **Parallel.** With ``jobs`` > 1 each worker process draws and runs whole chunks
  (:func:`harness.running.parallel.run_cases`), and with an ``executor`` each worker of a Dask
  cluster does (:mod:`harness.campaigns.executor`); the main process only collects outcomes,
  in chunk order. A draw does not depend on the process it is made in: Hypothesis' habit of
  mixing constants found in the source of the process's loaded modules into its draws is
  turned off while a chunk is drawn (:func:`source_free_draws`), so a worker that loaded
  other modules than this process draws the same cases. A chunk stops at its first failing case, and the campaign stops after the
  round of chunks in which the first failure (in case order) was found.
* **The property.** A case holds when its run completed and no criterion failed or errored
  (:func:`harness.campaigns.chaos.judge`); ``not_exercised`` is no failure here: a single case
  exercises what it exercises. A workload the scenario loader rejects is a bug of the
  vocabulary: it is counted as *invalid* with the loader's message, never run and never
  counted as a case.
* **Shrinking.** The first failure is shrunk by Hypothesis over the same chunk (the drawn
  cases' outcomes are cached by workload key, so the search replays to the failure without
  running anything again), at most ``max_shrink_runs`` new runs, then written atomically to
  the regressions folder as a readable scenario TOML with a header naming the failing
  criteria, the seed and the replay command, loaded back and run again
  (:attr:`GenerationFailure.reproduced`).
* **What was reached.** Each case reports the features its workload drew and the classes of
  situations its *trace* shows (:func:`reached_classes`: a fault that fired, a wait answered
  after a restart, the same call id waiting in two sessions, a stream cut after its tool calls
  were read...), so the campaign prints the feature mix it planned and the one it reached.

:func:`first_catch` is the self-test by generation: the same cases, in order, until one fails
on a mutant; it returns how many cases that took.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from harness.campaigns.chaos import (
    ChaosError, Outcome, dumps_toml, judge, require_hypothesis, write_and_rerun,
)
from harness.campaigns.executor import Executor, LocalPool
from harness.contract import Failpoint, Implementation
from harness.contract.errors import HarnessError, ScenarioError
from harness.criteria.base import Criterion
from harness.trace.record import Kind, Trace

CHUNK = 10
"""Workloads per chunk: the unit a worker draws and runs, and the unit of determinism. Each
chunk is one entry of the workload schedule (the swarm, or one family:
:data:`harness.campaigns.workloads.FAMILY_SCHEDULE`), so it is small: every family comes up
within every few hundred cases."""
DEFAULT_BUDGET = 200
DEFAULT_MAX_SHRINK_RUNS = 300
DEFAULT_REGRESSIONS_DIR = os.path.join("scenarios", "regressions")

Runner = Callable[..., Any]
Progress = Callable[[Any], None]


class GenerationError(HarnessError):
    """A generation campaign could not run (bad budget, an implementation that is not
    deterministic, an unwritable regressions folder)."""


@dataclass(frozen=True, slots=True)
class CaseResult:
    """One generated case as run: its position, its workload, what it reached, its verdict."""

    index: int
    """0-based position in the campaign (chunk * CHUNK + position in the chunk)."""
    key: str
    features: tuple[str, ...]
    reached: tuple[str, ...]
    outcome: Outcome
    duration_s: float
    reference_failed: bool = False
    """Only when run with a reference to compare (:func:`first_catch`): the reference fails
    this case too, so it says nothing about the implementation."""


@dataclass(frozen=True, slots=True)
class InvalidCase:
    """A drawn workload the loader rejected: a bug of the vocabulary, never run."""

    index: int
    key: str
    problem: str


@dataclass(frozen=True, slots=True)
class ChunkResult:
    chunk: int
    cases: tuple[CaseResult, ...]
    invalid: tuple[InvalidCase, ...]
    drawn: int
    """Workloads the chunk drew (cases + invalid + those after its first failure)."""


@dataclass(frozen=True, slots=True)
class ChunkDone:
    """Progress: a chunk was run."""

    chunk: int
    cases: int
    failed: bool
    elapsed_s: float
    total_cases: int


@dataclass(frozen=True, slots=True)
class GenerationFailure:
    data: Mapping[str, Any]
    """The shrunk workload (a scenario file's data)."""
    outcome: Outcome
    regression_file: str
    replay: str
    reproduced: bool
    replay_outcome: Outcome
    first_index: int
    """The position of the first failing case before shrinking."""
    shrink_runs: int


@dataclass(frozen=True, slots=True)
class GenerationResult:
    seed: int
    impl_spec: str
    cases: tuple[CaseResult, ...]
    invalid: tuple[InvalidCase, ...]
    failure: GenerationFailure | None
    elapsed_s: float

    @property
    def passed(self) -> bool:
        return self.failure is None and not self.invalid

    @property
    def cases_per_s(self) -> float:
        return len(self.cases) / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def feature_mix(self) -> Counter[str]:
        return Counter(f for case in self.cases for f in case.features)

    def reached_mix(self) -> Counter[str]:
        return Counter(c for case in self.cases for c in case.reached)


# --------------------------------------------------------------------------- what was reached


def _review_key(event: Any) -> tuple[str, str]:
    request = event.data.get("request") or {}
    return str(request.get("tool", "")), str(request.get("operation", ""))


def reached_classes(trace: Trace) -> frozenset[str]:
    """The classes of situations a run really reached, read from the world's events.

    Pure function of the trace. ``fired:<action>`` for every fault that fired (and
    ``fired:<action>@<failpoint>``); ``crash`` / ``restart``; ``prompt``; ``answered``;
    ``answered_after_restart``; ``escalation_requested``; ``stream:<how>`` for every stream
    that did not end normally and ``stream_cut_after_calls`` when such a stream had served
    complete tool calls; ``restart_after_partial_text`` (a restart or crash after an EOF
    stream with text and before that session's next request); ``crash_mid_idempotent_tool``
    (a crash between the start record and the result of an idempotent tool, read from the
    ledger's invocation and the failpoint's context); ``same_call_id_waiting_in_two_sessions``;
    ``same_command_reviewed_in_two_sessions``; ``same_command_reviewed_in_two_task_contexts``;
    ``same_command_reviewed_under_two_versions`` (the session's permission version changed
    between two reviews of one operation); ``review_held_two_instances`` (two instances
    reviewed one call); ``failure_table_overflow`` (17+ definite tool failures in one
    session); ``checkpoint_loaded``; ``concurrent_turn``;
    ``restart_after_threshold_approval`` (a crash or restart after the owner approved a wait
    the denial thresholds led to)."""
    from harness.campaigns.workloads import IDEMPOTENT_TOOLS

    found: set[str] = set()
    prompts_by_call: dict[str, set[str]] = {}
    reviews: dict[tuple[str, str], list[Any]] = {}
    versions_seen: dict[str, int] = {}
    review_versions: dict[tuple[str, str], set[tuple[str, int]]] = {}
    failures: Counter[str] = Counter()
    restarted = False
    cut_with_text: dict[str, int] = {}  # session -> index of an EOF stream with partial text
    request_session: dict[str, str] = {}
    running_idempotent: dict[int, str] = {}  # instance -> an idempotent call it started
    call_tools = {str(call.get("tool_call_id")): call.get("tool")
                  for event in trace.of_kind(Kind.MODEL_STREAM_END)
                  for call in event.data.get("tool_calls") or ()}
    for event in trace.events:
        kind, data = event.kind, event.data
        if kind == Kind.FAILPOINT and data.get("action", "none") != "none":
            found.add(f"fired:{data['action']}")
            found.add(f"fired:{data['action']}@{data.get('name')}")
        elif kind == Kind.CRASH:
            found.add("crash")
            if data.get("failpoint") in (Failpoint.AFTER_START_RECORDED.value,
                                         Failpoint.AFTER_TOOL_RETURNED.value) \
                    and event.instance in running_idempotent:
                found.add("crash_mid_idempotent_tool")
            for session in list(cut_with_text):
                found.add("restart_after_partial_text")
                del cut_with_text[session]
        elif kind == Kind.RESTART:
            found.add("restart")
            restarted = True
            for session in list(cut_with_text):
                found.add("restart_after_partial_text")
                del cut_with_text[session]
        elif kind == Kind.MODEL_REQUEST:
            session = str(data.get("session_id", ""))
            request_session[str(data.get("request_id", ""))] = session
            cut_with_text.pop(session, None)
        elif kind == Kind.MODEL_STREAM_END:
            how = data.get("how", "end")
            if how != "end":
                found.add(f"stream:{how}")
                if data.get("tool_call_ids"):
                    found.add("stream_cut_after_calls")
                if how == "eof" and data.get("text"):
                    session = request_session.get(str(data.get("request_id", "")), "")
                    cut_with_text[session] = event.index
        elif kind == Kind.APPROVAL_PROMPT:
            found.add("prompt")
            prompts_by_call.setdefault(str(data.get("tool_call_id", "")), set()).add(
                str(data.get("session_id", "")))
        elif kind == Kind.DRIVER_CALL:
            method = data.get("method")
            if method == "answer_approval" and not data.get("skipped"):
                found.add("answered")
                if restarted:
                    found.add("answered_after_restart")
            elif method == "load_checkpoint" and not data.get("skipped"):
                found.add("checkpoint_loaded")
            elif method == "concurrent_turn":
                found.add("concurrent_turn")
            elif method in ("update_rules",):
                args = data.get("args", {})
                versions_seen[str(args.get("session_id", ""))] = int(
                    args.get("permission_version", 0) or 0)
        elif kind == Kind.CLASSIFIER_REQUEST:
            key = _review_key(event)
            reviews.setdefault(key, []).append(event)
            request = data.get("request") or {}
            session = str(request.get("session_id", ""))
            review_versions.setdefault(key, set()).add((session, versions_seen.get(session, 1)))
        elif kind == Kind.TOOL_EXECUTED:
            if data.get("escalation_requested"):
                found.add("escalation_requested")
            if data.get("status") == "failed" or data.get("error_kind") == "failed":
                failures[str(data.get("session_id", ""))] += 1
        if kind == Kind.FAILPOINT and data.get("name") == Failpoint.AFTER_START_RECORDED.value:
            call = str((data.get("context") or {}).get("tool_call_id", ""))
            if call_tools.get(call) in IDEMPOTENT_TOOLS:
                running_idempotent[event.instance] = call
        if kind in (Kind.TOOL_EXECUTED, Kind.TOOL_UNAVAILABLE):
            running_idempotent.pop(event.instance, None)
    if any(len(sessions_) > 1 for sessions_ in prompts_by_call.values()):
        found.add("same_call_id_waiting_in_two_sessions")
    for events in reviews.values():
        requests = [e.data.get("request") or {} for e in events]
        if len({r.get("session_id") for r in requests}) > 1:
            found.add("same_command_reviewed_in_two_sessions")
        if len({(r.get("trusted_cwd"), r.get("user_requirements")) for r in requests}) > 1:
            found.add("same_command_reviewed_in_two_task_contexts")
        if len({e.instance for e in events}) > 1 and any(
                r.get("session_id") == requests[0].get("session_id") for r in requests[1:]):
            found.add("review_held_two_instances")
    for pairs in review_versions.values():
        by_session: dict[str, set[int]] = {}
        for session, version in pairs:
            by_session.setdefault(session, set()).add(version)
        if any(len(v) > 1 for v in by_session.values()):
            found.add("same_command_reviewed_under_two_versions")
    if any(count > 16 for count in failures.values()):
        found.add("failure_table_overflow")
    if _restart_after_threshold_approval(trace):
        found.add("restart_after_threshold_approval")
    return frozenset(found)


def _restart_after_threshold_approval(trace: Trace) -> bool:
    """An approval the denial thresholds led to (the denial oracle's armed prompt), approved,
    and a crash or restart after the answer."""
    from harness.criteria.denial_oracle import replay

    # cheap first: the denial oracle's replay runs only for a case with an approving answer
    # followed by a crash or restart (this runs for every generated case)
    approvals = [e.index for e in trace.of_kind(Kind.DRIVER_CALL)
                 if e.data.get("method") == "answer_approval" and not e.data.get("skipped")
                 and (e.data.get("args") or {}).get("approve")]
    if not approvals or not any(e.index > approvals[0]
                                for e in trace.of_kind(Kind.CRASH, Kind.RESTART)):
        return False
    armed = {m.index for m in replay(trace).moments if m.what == "prompt" and m.armed_all}
    if not armed:
        return False
    waits = {str(e.data.get("wait_id", "")) for e in trace.events
             if e.index in armed and e.kind == Kind.APPROVAL_PROMPT}
    answers = [e.index for e in trace.of_kind(Kind.DRIVER_CALL)
               if e.data.get("method") == "answer_approval" and not e.data.get("skipped")
               and str((e.data.get("args") or {}).get("wait_id", "")) in waits
               and (e.data.get("args") or {}).get("approve")]
    return bool(answers) and any(e.index > answers[0]
                                 for e in trace.of_kind(Kind.CRASH, Kind.RESTART))


# --------------------------------------------------------------------------- drawing


def chunk_seed(seed: int, chunk: int) -> int:
    """The Hypothesis seed of chunk ``chunk`` of a campaign under ``seed``."""
    digest = hashlib.sha256(f"lifecycle-harness generate {seed} {chunk}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def _settings(hypothesis: Any, examples: int, *, shrink: bool = True) -> Any:
    """The settings of every draw of a chunk: drawing it and searching it again to shrink a
    failure must use the same ones (Hypothesis' choice of examples depends on them)."""
    phases = (hypothesis.Phase.generate, hypothesis.Phase.shrink) if shrink \
        else (hypothesis.Phase.generate,)
    return hypothesis.settings(
        parent=hypothesis.settings.get_profile("default"),
        max_examples=examples,
        database=None,
        derandomize=False,  # the explicit seed is the one source of randomness
        deadline=None,
        phases=phases,
        suppress_health_check=list(hypothesis.HealthCheck),
        report_multiple_bugs=False,
        print_blob=False,
        verbosity=hypothesis.Verbosity.quiet,
    )


def chunk_plan(chunk: int) -> str | None:
    """What chunk ``chunk`` draws: ``None`` (the swarm) or a family's name."""
    from harness.campaigns.workloads import FAMILY_SCHEDULE

    return FAMILY_SCHEDULE[chunk % len(FAMILY_SCHEDULE)]


def draw_chunk(seed: int, chunk: int, context: Any, count: int = CHUNK) -> list[Any]:
    """The workloads of chunk ``chunk`` (at most ``count``), in draw order."""
    hypothesis = require_hypothesis()
    from harness.campaigns.workloads import workloads

    drawn: list[Any] = []

    def record(workload: Any) -> None:
        drawn.append(workload)

    settings = _settings(hypothesis, count)
    test = hypothesis.seed(chunk_seed(seed, chunk))(
        settings(hypothesis.given(workloads(context, chunk_plan(chunk)))(record)))
    with source_free_draws():
        test()
    return drawn[:count]


@contextlib.contextmanager
def source_free_draws() -> Iterator[None]:
    """Hypothesis draws without the constants of the process's own source code.

    Hypothesis (6.13x and later) mixes into about one draw in twenty constants it collects
    from the source of every *local* module loaded in the process (not the standard library
    nor site-packages). A chunk drawn after other modules were imported, in a worker that
    imported fewer (a Dask worker has no command line loaded), from an installed wheel
    (whose modules are not local), or after any edit that adds a literal somewhere in the
    harness, would then be other cases under the same seed. Inside this block the local
    constants are an empty set (Hypothesis' own built-in constants still apply); the cache
    of permitted constants is cleared on the way in and out so no draw outside mixes the
    two. Without that part of Hypothesis (older versions) this does nothing."""
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants
    except ImportError:
        yield
        return
    original = getattr(providers, "_get_local_constants", None)
    cache = getattr(providers, "CONSTANTS_CACHE", None)
    if original is None or cache is None:
        yield
        return
    empty = Constants()
    providers._get_local_constants = lambda: empty
    cache.cache.clear()
    try:
        yield
    finally:
        providers._get_local_constants = original
        cache.cache.clear()


def generated_workloads(seed: int, count: int, context: Any) -> list[Any]:
    """The first ``count`` workloads of the campaign under ``seed`` (the cases ``generate``
    runs, in order), without running them: ``diff --generate`` compares two implementations
    on them."""
    drawn: list[Any] = []
    for chunk, size in _chunks(count):
        drawn.extend(draw_chunk(seed, chunk, context, size))
    return drawn


def implementation_context(implementation: Implementation) -> Any:
    """What a workload may name of the implementation: its checkpoint fixtures (by stem), and
    every optional feature whatever it declares. Features are judged by behaviour
    (:mod:`harness.criteria.feature_evidence`): an implementation without one refuses it the
    documented way (a second instance's ``open`` raises, an escalation request is a definite
    failure), and workloads that ask for it are how the behaviour gets the chance to show."""
    from harness.campaigns.workloads import Context
    from harness.contract import OPTIONAL_FEATURES

    info = implementation.info
    fixtures = tuple(Path(path).stem for path in getattr(info, "checkpoint_fixtures", ()) or ())
    return Context(fixtures=fixtures, features=frozenset(str(f) for f in OPTIONAL_FEATURES))


def load_workload(data: Mapping[str, Any]) -> Any:
    """The scenario of a workload's data (``ScenarioError`` when the loader rejects it)."""
    from harness.scenarios.loader import parse

    return parse(dict(data), f"<generated {data.get('id', '')}>")


# --------------------------------------------------------------------------- running


def run_workload(implementation: Implementation, data: Mapping[str, Any], seed: int, *,
                 criteria: Sequence[Criterion], runner: Runner, time_limit_s: float
                 ) -> tuple[Outcome, tuple[str, ...]]:
    """Run one workload; its verdict and the classes its trace reached."""
    scenario = load_workload(data)
    run = runner(implementation, scenario, seed, time_limit_s=time_limit_s, data_root=None)
    return judge(run, criteria), tuple(sorted(reached_classes(run.trace)))


def run_chunk(implementation: Implementation, chunk: int, *, seed: int, context: Any,
              count: int, criteria: Sequence[Criterion], runner: Runner, time_limit_s: float,
              reference: Implementation | None = None) -> ChunkResult:
    """Draw chunk ``chunk`` and run its cases in order, up to the first failure. With a
    ``reference``, a case that fails is run on it too, and one the reference fails as well
    is marked so and passed over (it says nothing of the implementation)."""
    cases: list[CaseResult] = []
    invalid: list[InvalidCase] = []
    drawn = draw_chunk(seed, chunk, context, count)
    for position, workload in enumerate(drawn):
        index = chunk * CHUNK + position
        key = workload.key()
        try:
            load_workload(workload.data)
        except ScenarioError as exc:
            invalid.append(InvalidCase(index, key, str(exc)))
            continue
        started = time.monotonic()
        outcome, reached = run_workload(implementation, workload.data, seed, criteria=criteria,
                                        runner=runner, time_limit_s=time_limit_s)
        reference_failed = False
        if outcome.failed and reference is not None:
            reference_failed = run_workload(reference, workload.data, seed, criteria=criteria,
                                            runner=runner, time_limit_s=time_limit_s)[0].failed
        cases.append(CaseResult(index, key, workload.features, reached, outcome,
                                time.monotonic() - started, reference_failed))
        if outcome.failed and not reference_failed:
            break
    return ChunkResult(chunk, tuple(cases), tuple(invalid), len(drawn))


def _chunk_count(budget: int | None, index: int) -> int:
    """How many workloads the chunk holding case ``index`` drew."""
    chunk = index // CHUNK
    return CHUNK if budget is None else min(CHUNK, budget - chunk * CHUNK)


def _chunks(budget: int | None) -> Iterable[tuple[int, int]]:
    chunk = 0
    while budget is None or chunk * CHUNK < budget:
        count = CHUNK if budget is None else min(CHUNK, budget - chunk * CHUNK)
        yield chunk, count
        chunk += 1


def run_generation(
    implementation: Implementation,
    *,
    seed: int = 0,
    budget: int | None = DEFAULT_BUDGET,
    time_s: float | None = None,
    impl_spec: str = "reference",
    regressions_dir: str | os.PathLike[str] = DEFAULT_REGRESSIONS_DIR,
    time_limit_s: float = 20.0,
    criteria: Sequence[Criterion] | None = None,
    runner: Runner | None = None,
    progress: Progress | None = None,
    max_shrink_runs: int = DEFAULT_MAX_SHRINK_RUNS,
    jobs: int = 1,
    shrink: bool = True,
    command: str = "",
    executor: Executor | None = None,
) -> GenerationResult:
    """Run one generation campaign (see the module docstring). ``budget`` cases at most
    (``None``: no count bound), and no new chunk after ``time_s`` wall-clock seconds.
    ``executor`` (default: ``jobs`` local worker processes) runs the chunks."""
    from harness.running.parallel import CaseFailure
    from harness.running.suite import default_criteria, default_runner

    require_hypothesis()
    if budget is None and time_s is None:
        raise GenerationError("give a budget of cases or a time limit (--budget N or --time-s T)")
    if budget is not None and budget < 1:
        raise GenerationError(f"budget {budget}: a campaign needs at least 1 case")
    criteria = tuple(default_criteria() if criteria is None else criteria)
    runner = default_runner() if runner is None else runner
    context = implementation_context(implementation)
    executor = LocalPool(jobs) if executor is None else executor
    width = executor.width
    started = time.monotonic()
    cases: list[CaseResult] = []
    invalid: list[InvalidCase] = []
    chunks = iter(_chunks(budget))
    failing: CaseResult | None = None
    while failing is None:
        if time_s is not None and time.monotonic() - started >= time_s:
            break
        round_ = [c for _, c in zip(range(width), chunks)]
        if not round_:
            break

        def work(i: int) -> ChunkResult:
            chunk, count = round_[i]
            return run_chunk(implementation, chunk, seed=seed, context=context, count=count,
                             criteria=criteria, runner=runner, time_limit_s=time_limit_s)

        results = executor.run(work, len(round_))
        for position, ((chunk, _count), item) in enumerate(zip(round_, results)):
            if isinstance(item, CaseFailure):  # a worker died: run the chunk here instead
                item = work(position)
            cases.extend(item.cases)
            invalid.extend(item.invalid)
            if progress:
                progress(ChunkDone(chunk, len(item.cases), any(c.outcome.failed for c in item.cases),
                                   time.monotonic() - started, len(cases)))
            bad = next((c for c in item.cases if c.outcome.failed), None)
            if bad is not None:
                failing = bad
                break
    elapsed = time.monotonic() - started
    failure = None
    if failing is not None:
        cases = [c for c in cases if c.index <= failing.index]
        failure = _shrink_and_record(
            implementation, failing, seed=seed, chunk_count=_chunk_count(budget, failing.index),
            context=context, criteria=criteria,
            runner=runner, time_limit_s=time_limit_s, max_shrink_runs=max_shrink_runs,
            regressions_dir=regressions_dir, impl_spec=impl_spec, shrink=shrink,
            command=command, known={c.key: c.outcome for c in cases})
    return GenerationResult(seed, impl_spec, tuple(cases), tuple(invalid), failure, elapsed)


# --------------------------------------------------------------------------- shrinking


class _Counterexample(Exception):
    def __init__(self, data: Mapping[str, Any], outcome: Outcome) -> None:
        super().__init__("counterexample")
        self.data = data
        self.outcome = outcome


def _shrink_and_record(implementation: Implementation, failing: CaseResult, *, seed: int,
                       chunk_count: int,
                       context: Any, criteria: Sequence[Criterion], runner: Runner,
                       time_limit_s: float, max_shrink_runs: int,
                       regressions_dir: str | os.PathLike[str], impl_spec: str, shrink: bool,
                       command: str, known: Mapping[str, Outcome]) -> GenerationFailure:
    hypothesis = require_hypothesis()
    from harness.campaigns.workloads import workloads

    chunk = failing.index // CHUNK
    cache: dict[str, Outcome] = dict(known)
    state = {"runs": 0}
    smallest: list[tuple[Mapping[str, Any], Outcome]] = []

    def prop(workload: Any) -> None:
        key = workload.key()
        outcome = cache.get(key)
        if outcome is None:
            if state["runs"] >= max_shrink_runs:
                return  # the shrink budget is spent: a new candidate counts as passing
            try:
                load_workload(workload.data)
            except ScenarioError:
                return
            state["runs"] += 1
            outcome, _ = run_workload(implementation, workload.data, seed, criteria=criteria,
                                      runner=runner, time_limit_s=time_limit_s)
            cache[key] = outcome
        if outcome.failed:
            smallest.append((workload.data, outcome))
            raise _Counterexample(workload.data, outcome)

    settings = _settings(hypothesis, chunk_count, shrink=shrink)
    test = hypothesis.seed(chunk_seed(seed, chunk))(
        settings(hypothesis.given(workloads(context, chunk_plan(chunk)))(prop)))
    try:
        with source_free_draws():
            test()
    except _Counterexample as found:
        data, outcome = found.data, found.outcome
    except hypothesis.errors.Flaky as exc:
        raise GenerationError(f"the implementation is not deterministic: a failing case passed "
                              f"when run again ({exc}); check it with `lifecycle-harness run "
                              f"--check-determinism --impl {impl_spec}`") from None
    else:
        if not smallest:
            raise GenerationError(
                f"case {failing.index} failed ({failing.outcome.brief()}) but did not fail "
                f"again when drawn a second time; run `lifecycle-harness generate --seed "
                f"{seed} --no-shrink` and report it (the generator is not deterministic)")
        data, outcome = smallest[-1]
    return _record(implementation, data, outcome, seed=seed, criteria=criteria, runner=runner,
                   time_limit_s=time_limit_s, regressions_dir=regressions_dir,
                   impl_spec=impl_spec, command=command, first_index=failing.index,
                   shrink_runs=state["runs"])


def regression_data(data: Mapping[str, Any], outcome: Outcome) -> dict[str, Any]:
    """The shrunk workload as a regression scenario: a stable id from its content, the stage
    of its first failing criterion, a title naming them."""
    from harness.campaigns.workloads import Workload

    digest = Workload({k: v for k, v in data.items() if k != "id"}, ()).key()[:10]
    first = outcome.failing[0] if outcome.failing else ""
    stage = _stage_of(first)
    out = dict(data)
    out["id"] = f"regression-generated-{digest}"
    out["stage"] = stage
    out["title"] = ("a generated workload failing " + ", ".join(outcome.failing)
                    if outcome.failing else "a generated workload whose run did not complete")
    from harness.contract.conformance import scenario_requirements

    # a scenario file says which optional features its content needs, as the bundled ones do
    needs = sorted(f.value for f in scenario_requirements(load_workload(data)))
    if needs:
        out["requires"] = needs
    return out


def _stage_of(criterion_id: str) -> str:
    if criterion_id.startswith(("L1", "L2", "L3", "L4", "L5")):
        return criterion_id[:2].lower()
    if criterion_id.startswith("M"):
        return "m"
    return "x"


def _comment(text: str) -> str:
    return "\n".join(f"# {line}".rstrip() for line in text.splitlines())


def regression_text(data: Mapping[str, Any], outcome: Outcome, *, seed: int, replay: str,
                    impl_spec: str, command: str) -> str:
    failing = ", ".join(outcome.failing) or "(the run did not complete)"
    lines = [
        f"Regression found by a generation campaign against {impl_spec}, seed {seed}, and",
        "shrunk to this workload; the generator wrote it (harness/campaigns/workloads.py).",
        f"Failing: {failing}.",
        *(f"  {note}" for note in outcome.notes[:6]),
        *([f"Run error: {outcome.error.splitlines()[0]}"] if outcome.error else []),
        f"Replay: {replay}",
        *([f"Campaign: {command}"] if command else []),
        "Before keeping it in the suite, say here which side was wrong and why (quote the",
        "seed design), as the other regression files do.",
    ]
    return _comment("\n".join(lines)) + "\n\n" + dumps_toml(data)


def _record(implementation: Implementation, data: Mapping[str, Any], outcome: Outcome, *,
            seed: int, criteria: Sequence[Criterion], runner: Runner, time_limit_s: float,
            regressions_dir: str | os.PathLike[str], impl_spec: str, command: str,
            first_index: int, shrink_runs: int) -> GenerationFailure:
    from harness.running.suite import display_path, replay_command

    plain = regression_data(data, outcome)
    path = Path(regressions_dir) / f"{plain['id']}.toml"
    replay = replay_command(os.fspath(path), seed, impl_spec)
    try:
        text = regression_text(plain, outcome, seed=seed, replay=replay, impl_spec=impl_spec,
                               command=command)
        reproduced, again = write_and_rerun(path, text, outcome, implementation=implementation,
                                            seed=seed, criteria=criteria, runner=runner,
                                            time_limit_s=time_limit_s)
    except ChaosError as exc:
        raise GenerationError(str(exc)) from None
    return GenerationFailure(plain, outcome, display_path(os.fspath(path)), replay, reproduced,
                             again, first_index, shrink_runs)


# --------------------------------------------------------------------------- self-test


@dataclass(frozen=True, slots=True)
class Catch:
    """How many generated cases it took to catch one mutant."""

    mutant: str
    expected: tuple[str, ...]
    cases: int | None
    """Cases run up to and including the first that failed on the mutant and passed on the
    reference (``None``: none within the budget)."""
    failing: tuple[str, ...]
    """The criteria that failed on that case (empty when the run itself errored)."""
    error: str
    case_index: int | None
    reference_failures: tuple[int, ...]
    """Cases (by index) the mutant failed and the reference failed too: passed over."""

    @property
    def by_expected(self) -> bool:
        return bool(set(self.failing) & set(self.expected))


def first_catch(implementation: Implementation, *, seed: int, budget: int,
                criteria: Sequence[Criterion], runner: Runner, time_limit_s: float,
                reference: Implementation | None = None, jobs: int = 1, context: Any = None
                ) -> tuple[int | None, CaseResult | None, tuple[int, ...]]:
    """Run the campaign's cases in order on ``implementation`` until one fails (and, with a
    ``reference``, passes there): the number of cases run up to and including it (``None``
    when none did within ``budget``), that case, and the cases passed over because the
    reference failed them too. The cases are those of the campaign under ``seed`` for the
    reference's context (its fixtures and features), so every mutant meets the same cases."""
    from harness.running.parallel import CaseFailure, run_cases

    context = implementation_context(reference or implementation) if context is None \
        else context
    chunks = iter(_chunks(budget))
    counted = 0
    passed_over: list[int] = []
    while True:
        round_ = [c for _, c in zip(range(max(1, jobs)), chunks)]
        if not round_:
            return None, None, tuple(passed_over)

        def work(i: int) -> ChunkResult:
            chunk, count = round_[i]
            return run_chunk(implementation, chunk, seed=seed, context=context, count=count,
                             criteria=criteria, runner=runner, time_limit_s=time_limit_s,
                             reference=reference)

        results = run_cases(work, len(round_), jobs=jobs, reuse_workers=True)
        for i, item in enumerate(results):
            if isinstance(item, CaseFailure):
                item = work(i)
            for case in item.cases:
                counted += 1
                if case.reference_failed:
                    passed_over.append(case.index)
                elif case.outcome.failed:
                    return counted, case, tuple(passed_over)
            # a chunk cut short by a catch ends the search above; a whole chunk ran here


def catch_mutants(mutants: Sequence[Any], resolve: Callable[[str], Implementation], *,
                  reference: Implementation, seed: int, budget: int,
                  criteria: Sequence[Criterion], runner: Runner, time_limit_s: float,
                  jobs: int = 1, progress: Progress | None = None) -> tuple[Catch, ...]:
    """The self-test by generation: for each mutant, the cases it took to catch it."""
    context = implementation_context(reference)
    found = []
    for number, mutant in enumerate(mutants, start=1):
        implementation = resolve(f"mutant:{mutant.name}")
        cases, case, passed_over = first_catch(
            implementation, seed=seed, budget=budget, criteria=criteria, runner=runner,
            time_limit_s=time_limit_s, reference=reference, jobs=jobs, context=context)
        catch = Catch(mutant.name, tuple(mutant.expected), cases,
                      case.outcome.failing if case else (),
                      case.outcome.error if case else "", case.index if case else None,
                      passed_over)
        found.append(catch)
        if progress:
            progress((number, len(mutants), catch))
    return tuple(found)


def catch_lines(catches: Sequence[Catch], budget: int) -> list[str]:
    """The table of cases-to-catch per mutant, as Markdown lines."""
    lines = ["| mutant | cases to catch | failing criteria | expected | by expected |",
             "|---|---:|---|---|---|"]
    for c in catches:
        cases = f"{c.cases}" if c.cases is not None else f"not in {budget}"
        failing = ", ".join(c.failing) or ("run error" if c.error else "-")
        lines.append(f"| {c.mutant} | {cases} | {failing} | {', '.join(c.expected)} | "
                     f"{'yes' if c.by_expected else 'no'} |")
    caught = [c for c in catches if c.cases is not None]
    lines.append("")
    lines.append(f"{len(caught)}/{len(catches)} mutants caught within {budget} generated cases "
                 f"each; {sum(c.by_expected for c in catches)} by an expected criterion.")
    if caught:
        ordered = sorted(c.cases or 0 for c in caught)
        lines.append(f"cases to catch: median {ordered[len(ordered) // 2]}, max {ordered[-1]}.")
    return lines


def as_dict(result: GenerationResult) -> dict[str, Any]:
    """The campaign as JSON data (what ``generate.json`` holds)."""
    def outcome(o: Outcome) -> dict[str, Any]:
        return {"failing": list(o.failing), "error": o.error, "notes": list(o.notes),
                "trace_digest": o.trace_digest}

    return {
        "seed": result.seed,
        "impl": result.impl_spec,
        "cases": len(result.cases),
        "elapsed_s": round(result.elapsed_s, 3),
        "cases_per_s": round(result.cases_per_s, 1),
        "invalid": [dataclasses.asdict(i) for i in result.invalid],
        "feature_mix": dict(sorted(result.feature_mix().items())),
        "reached_mix": dict(sorted(result.reached_mix().items())),
        "digests": [[c.index, c.key, c.outcome.trace_digest] for c in result.cases],
        "failure": None if result.failure is None else {
            "regression_file": result.failure.regression_file,
            "replay": result.failure.replay,
            "reproduced": result.failure.reproduced,
            "first_index": result.failure.first_index,
            "shrink_runs": result.failure.shrink_runs,
            "outcome": outcome(result.failure.outcome),
        },
    }
