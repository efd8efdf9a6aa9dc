"""Generation campaigns: valid, deterministic workloads; short derandomized campaigns on the
reference (clean) and on mutants (caught, shrunk, written, replayed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("hypothesis")

import reference_impl  # noqa: E402
from harness.campaigns import generate as G  # noqa: E402
from harness.campaigns.workloads import FAMILIES, FAMILY_SCHEDULE, FEATURES, Context  # noqa: E402
from harness.cli import app as cli  # noqa: E402
from harness.implementations import resolve  # noqa: E402
from harness.running.suite import default_criteria, default_runner  # noqa: E402
from harness.scenarios.loader import load  # noqa: E402

REFERENCE = reference_impl.implementation()
CONTEXT = G.implementation_context(REFERENCE)


def test_every_drawn_workload_loads_and_uses_only_its_drawn_features():
    seen: set[str] = set()
    for chunk in range(2 * len(FAMILY_SCHEDULE)):  # the schedule twice: 16 swarm chunks
        for workload in G.draw_chunk(11, chunk, CONTEXT):
            scenario = G.load_workload(workload.data)
            assert scenario.id == workload.data["id"]
            assert set(workload.features) <= set(FEATURES) | set(FAMILIES)
            faults = workload.data.get("faults", [])
            if "pipeline_fault" in workload.features:  # one fault where the pipeline must pass
                assert len(faults) == 1 and not faults[0].get("optional")
            else:
                assert all(f["optional"] for f in faults), "a generated fault must be optional"
            assert all(s.get("optional") for s in workload.data["steps"]
                       if s["do"] == "concurrent_turn")
            seen.update(workload.features)
    assert seen == set(FEATURES) | set(FAMILIES), f"never drawn: {sorted((set(FEATURES) | set(FAMILIES)) - seen)}"


def test_the_same_seed_draws_the_same_workloads_and_another_seed_others():
    first = [w.key() for w in G.draw_chunk(5, 0, CONTEXT, 40)]
    again = [w.key() for w in G.draw_chunk(5, 0, CONTEXT, 40)]
    other = [w.key() for w in G.draw_chunk(6, 0, CONTEXT, 40)]
    assert first == again
    assert first != other
    assert len(set(first)) > 30  # mostly distinct cases


def test_what_a_context_lacks_is_never_drawn():
    bare = Context(fixtures=(), features=frozenset())
    for workload in G.draw_chunk(3, 0, bare, 60):
        assert not {"concurrency", "checkpoints", "escalation"} & set(workload.features)
        assert not [s for s in workload.data["steps"]
                    if s["do"] in ("concurrent_turn", "load_checkpoint")]


def test_features_are_drawn_for_every_implementation_and_fixtures_only_when_declared():
    """Features are judged by behaviour: workloads ask for them whatever is declared; only a
    checkpoint fixture must be one the implementation names."""
    from harness.contract import ImplementationInfo

    class Bare:
        info = ImplementationInfo(name="bare", version="0")

    context = G.implementation_context(Bare())
    assert {"multi_instance", "sandbox_escalation"} <= context.features and context.fixtures == ()
    assert G.implementation_context(REFERENCE).fixtures


def test_a_short_campaign_on_the_reference_finds_nothing_and_is_deterministic():
    runs = [G.run_generation(REFERENCE, seed=3, budget=25, criteria=default_criteria(),
                             runner=default_runner(), jobs=1) for _ in range(2)]
    for result in runs:
        assert result.failure is None and not result.invalid, (
            result.failure and result.failure.outcome.brief())
        assert len(result.cases) == 25
    assert [c.outcome.trace_digest for c in runs[0].cases] == \
        [c.outcome.trace_digest for c in runs[1].cases]
    assert runs[0].feature_mix() and runs[0].reached_mix()


ISSUE_CLASSES = (
    # identity axes
    "same_call_id_waiting_in_two_sessions", "same_command_reviewed_in_two_sessions",
    "same_command_reviewed_in_two_task_contexts", "same_command_reviewed_under_two_versions",
    "review_held_two_instances",
    # restarts where they matter
    "restart_after_threshold_approval", "restart_after_partial_text", "crash_mid_idempotent_tool",
    # a stream cut after its tool calls were read
    "stream_cut_after_calls",
    # and the hard cases of other criteria
    "failure_table_overflow", "escalation_requested", "answered_after_restart",
    "checkpoint_loaded", "concurrent_turn",
)


def test_a_short_campaign_reaches_every_class_of_situation_and_the_reference_passes_it():
    """Each class of situation the hand-written suite missed has a generated family that
    reaches it: read from the traces (reached_classes), not from what was planned."""
    result = G.run_generation(REFERENCE, seed=5, budget=250, criteria=default_criteria(),
                              runner=default_runner(), jobs=1)
    assert result.failure is None and not result.invalid, (
        result.failure and result.failure.outcome.brief())
    reached = result.reached_mix()
    assert [c for c in ISSUE_CLASSES if not reached[c]] == []


def test_a_mutant_is_caught_shrunk_written_and_replayed(tmp_path):
    mutant = resolve("mutant:failure-table-overflows")
    result = G.run_generation(mutant, seed=0, budget=100, criteria=default_criteria(),
                              runner=default_runner(), regressions_dir=tmp_path,
                              impl_spec="mutant:failure-table-overflows", max_shrink_runs=60)
    failure = result.failure
    assert failure is not None
    assert "L1.1" in failure.outcome.failing
    assert failure.reproduced, failure.replay_outcome.brief()
    path = Path(failure.regression_file)
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# Regression found by a generation campaign")
    assert "--impl mutant:failure-table-overflows" in failure.replay
    scenario = load(path)
    assert scenario.id.startswith("regression-generated-") and scenario.stage == "l1"
    # shrunk: fewer steps and responses than a typical drawn case
    assert len(scenario.steps) <= 3


def test_generate_command_prints_the_rate_and_the_mix(tmp_path, capsys):
    report = tmp_path / "g.json"
    code = cli.main(["generate", "--seed", "4", "--budget", "12", "--jobs", "1",
                     "--regressions-dir", str(tmp_path / "r"), "--report", str(report)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "12 cases in" in out and "cases/s" in out
    assert "features drawn" in out and "situations reached" in out
    data = json.loads(report.read_text())
    assert data["cases"] == 12 and len(data["digests"]) == 12 and data["failure"] is None


def test_generate_command_rejects_bad_bounds(capsys):
    assert cli.main(["generate", "--budget", "0"]) == 2
    assert cli.main(["generate", "--budget", "3", "--time-s", "1"]) == 2
    capsys.readouterr()


def test_selftest_by_generation_counts_the_cases_to_catch(tmp_path, capsys):
    code = cli.main(["selftest", "--generate", "--budget", "60", "--jobs", "1",
                     "--mutants", "eof-reported-completed", "--report-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    data = json.loads((tmp_path / "generation.json").read_text())
    [catch] = data["mutants"]
    assert catch["mutant"] == "eof-reported-completed"
    assert 1 <= catch["cases"] <= 60
    assert set(catch["failing"]) & {"M2", "M5"}
    assert "| eof-reported-completed |" in (tmp_path / "generation.md").read_text()


def test_every_variant_of_every_family_is_drawn_and_the_schedule_takes_every_family(monkeypatch):
    # a family's situations are its variants: each must come up in a few hundred cases, or
    # the defects only one of them shows are met once in thousands (the self-test's misses)
    from harness.campaigns import workloads as W

    tables = {"INTERFERENCES": W.INTERFERENCES, "REPEAT_VARIANTS": W.REPEAT_VARIANTS,
              "RACE_HOLDS": W.RACE_HOLDS, "ESCALATION_VARIANTS": W.ESCALATION_VARIANTS,
              "CRASH_POINTS": W.CRASH_POINTS}
    chosen: dict[str, set] = {name: set() for name in tables}
    real = W._variant

    def recording(draw, variants):
        choice = real(draw, variants)
        for name, table in tables.items():
            if variants is table:
                chosen[name].add(choice)
        return choice

    monkeypatch.setattr(W, "_variant", recording)
    # the schedule eight times over: 80 cases of each family (a 2,000-case campaign has
    # more), about 6 per variant
    drawn = [w for chunk in range(8 * len(FAMILY_SCHEDULE)) if G.chunk_plan(chunk) is not None
             for w in G.draw_chunk(21, chunk, CONTEXT)]
    for name, table in tables.items():
        assert chosen[name] == set(table), f"{name}: never drawn {set(table) - chosen[name]}"
    planned = [G.chunk_plan(chunk) for chunk in range(len(FAMILY_SCHEDULE))]
    assert set(planned) == set(FAMILIES) | {None}
    assert planned.count(None) * 3 == len(planned), "one chunk in three is the swarm's"
    assert all(set(w.features) & set(FAMILIES) for w in drawn)
