"""The failing scenario's timeline, cited excerpts and cited ledger rows, and the suite
filling them into the result (only for scenarios that failed or errored)."""

from __future__ import annotations

from suite_fakes import FakeImplementation, FakeRun, FakeScenario, criterion, make_trace, render_faults

from harness.contract import Thresholds
from harness.report.result import ScenarioStatus
from harness.running.suite import run_suite
from harness.running.timeline import ENTRIES_MAX, build_timeline, cited_ledger_rows, injected_failpoints
from harness.trace.record import Trace, TraceEvent, TraceMeta
from harness.trace.lines import cited_excerpt


def _trace(*events: tuple[str, str, int, dict]) -> Trace:
    meta = TraceMeta(scenario_id="t", stage="l4", seed=1, implementation="fake", features=(),
                     thresholds=Thresholds(), sessions=(), tools=(), faults=())
    return Trace(meta, tuple(TraceEvent(i, source, kind, instance, data)
                             for i, (source, kind, instance, data) in enumerate(events)), ())


def _row(seq: int, instance: int, status: str = "ok") -> tuple[str, str, int, dict]:
    return ("world", "tool_executed", instance,
            {"ledger_seq": seq, "tool": "write_file", "tool_call_id": "c1", "status": status,
             "effect": "applied"})


CRASHED = _trace(
    ("harness", "driver_call", 0, {"method": "run_turn", "args": {}}),             # 0
    ("iut", "lifecycle_event", 0, {"event": {"type": "execution_started"}}),       # 1
    _row(1, 0),                                                                  # 2
    ("world", "failpoint", 0, {"name": "after_tool_returned", "action": "none"}),  # 3
    ("world", "failpoint", 0, {"name": "after_result_saved", "action": "crash", "hit": 1}),  # 4
    ("harness", "crash", 0, {"failpoint": "after_result_saved", "mode": "in_process"}),  # 5
    ("harness", "restart", 1, {"instance": 1}),                                  # 6
    ("harness", "driver_call", 1, {"method": "recover", "args": {}}),            # 7
    ("harness", "observed", 1, {"label": "after_restart"}),                      # 8
    _row(2, 1),                                                                  # 9
    ("world", "ui_publish", 1, {"projection": {"tool_call_id": "c1", "status": "succeeded",
                                               "recovery_actions": []}}),       # 10
    ("world", "tool_unavailable", 1, {"tool": "web", "tool_call_id": "c2", "reason": "down"}),  # 11
)


def test_timeline_has_a_lane_per_instance_and_marks_crash_restart_ledger_and_ui():
    timeline = build_timeline(CRASHED, cited=(9,))
    assert timeline.instances == (0, 1) and timeline.left_out == 0
    by_index = {entry.index: entry for entry in timeline.entries}
    assert sorted(by_index) == [0, 2, 4, 5, 6, 7, 9, 10, 11]  # no unfired failpoint, no observation
    assert by_index[5].kind == "crash" and by_index[5].instance == 0
    assert by_index[5].label == "CRASH at after_result_saved"
    assert by_index[6].label == "restart as i1" and by_index[6].instance == 1
    assert by_index[9].ledger_seq == 2 and by_index[9].label == "#2 write_file c1: ok, effect applied"
    assert by_index[2].ledger_seq == 1 and by_index[0].ledger_seq == 0
    assert by_index[10].label == "c1: succeeded (no actions)"
    assert by_index[4].label == "fault crash at after_result_saved (hit 1)"
    assert by_index[11].label == "web c2: not started (down)"


def test_a_cited_event_of_any_kind_is_kept():
    kept = {entry.index for entry in build_timeline(CRASHED, cited=(1, 8)).entries}
    assert {1, 8} <= kept
    assert 1 not in {entry.index for entry in build_timeline(CRASHED).entries}


def test_a_long_timeline_drops_routine_events_first_and_counts_them():
    calls = [("harness", "driver_call", 0, {"method": "run_turn"})] * (ENTRIES_MAX + 50)
    trace = _trace(*calls, _row(1, 0), ("harness", "crash", 0, {"failpoint": "x"}))
    cited = (3,)
    timeline = build_timeline(trace, cited)
    assert len(timeline.entries) == ENTRIES_MAX and timeline.left_out == 52
    kinds = [entry.kind for entry in timeline.entries]
    assert kinds[-2:] == ["tool_executed", "crash"] and 3 in {e.index for e in timeline.entries}


def test_injected_failpoints_are_those_where_a_fault_fired():
    assert injected_failpoints(CRASHED) == ("after_result_saved",)
    assert injected_failpoints(_trace(("world", "failpoint", 0, {"name": "x", "action": "none"}))) == ()


def test_cited_ledger_rows_are_rendered_in_full_in_ledger_order():
    rows = cited_ledger_rows(CRASHED, (2, 1, 2, 7))
    assert len(rows) == 3
    assert '"ledger_seq":1' in rows[0] and '"ledger_seq":2' in rows[1] and " i1 " in rows[1]
    assert rows[2] == "ledger row 7: not in the trace's ledger"
    assert cited_ledger_rows(CRASHED, ()) == ()


def test_cited_excerpt_shows_every_cited_event_with_gaps():
    long = make_trace(FakeScenario("t", marks=tuple(f"m{i}" for i in range(40))), 1)
    lines = cited_excerpt(long, (5, 30), radius=1)
    marked = [line for line in lines if line.startswith(">")]
    assert [line.split()[1] for line in marked] == ["5", "30"]
    assert lines[0] == "   ⋮ 4 events" and "   ⋮ 22 events" in lines and lines[-1] == "   ⋮ 10 events"
    assert len(lines) == 9
    near = cited_excerpt(long, (5, 7), radius=1)  # overlapping windows merge: events 4..8
    assert [line.split()[1] if line.startswith(">") else line.split()[0] for line in near] == [
        "⋮", "4", "5", "6", "7", "8", "⋮"]


def test_cited_excerpt_shrinks_context_to_fit_but_keeps_cited_events():
    long = make_trace(FakeScenario("t", marks=tuple(f"m{i}" for i in range(40))), 1)
    lines = cited_excerpt(long, (3, 10, 20), radius=2, lines_max=6)
    marked = [line.split()[1] for line in lines if line.startswith(">")]
    assert marked == ["3", "10", "20"]
    assert sum(1 for line in lines if not line.lstrip().startswith("⋮")) <= 6
    capped = cited_excerpt(long, tuple(range(0, 40, 2)), radius=0, lines_max=5)
    assert capped[-1] == "   ⋮ 15 more cited events"
    assert cited_excerpt(long, ()) == () and cited_excerpt(long, (999,)) == ()


def test_suite_keeps_a_timeline_only_for_failed_or_errored_scenarios():
    ok = FakeScenario("ok", marks=("A:ok",))
    bad = FakeScenario("bad", marks=("A:ok", "A:bad"))
    broken = FakeScenario("broken", marks=("A:ok",), error="hung in run_turn")

    def runner(implementation, scenario, seed, *, time_limit_s=20.0, data_root=None):
        trace = make_trace(scenario, seed)
        if scenario.id == "bad":  # a fault fired here
            extra = TraceEvent(len(trace.events), "world", "failpoint", 0,
                               {"name": "after_prepare", "action": "crash", "hit": 1})
            trace = Trace(trace.meta, trace.events + (extra,), (), trace.completed, trace.error)
        return FakeRun(trace, scenario.failpoints, scenario.error, 0.25)

    result = run_suite(FakeImplementation(), (ok, bad, broken), 7, criteria=(criterion("A"),),
                       runner=runner, fault_renderer=render_faults)
    by_id = {s.id: s for s in result.scenarios}
    assert by_id["ok"].status is ScenarioStatus.PASSED and by_id["ok"].timeline is None
    assert by_id["bad"].status is ScenarioStatus.FAILED and by_id["bad"].timeline is not None
    assert by_id["broken"].status is ScenarioStatus.ERROR and by_id["broken"].timeline is not None
    assert by_id["bad"].failpoints_injected == ("after_prepare",)
    assert by_id["ok"].failpoints_injected == ()
    cited = {entry.index for entry in by_id["bad"].timeline.entries if entry.kind == "mark"}
    assert cited == {2}  # the violating mark is kept although marks are not timeline kinds
    (violation,) = result.criteria[0].violations
    assert [line.split()[1] for line in violation.excerpt if line.startswith(">")] == ["2"]
