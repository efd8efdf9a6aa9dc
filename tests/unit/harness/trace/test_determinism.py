"""The determinism check finds the first diverging event and stays quiet on identical runs."""

import dataclasses

import reference_impl
from harness.trace.determinism import RecordingRunner, check_determinism, first_divergence
from harness.running.runner import run_scenario
from harness.scenarios.loader import load
from harness.trace.record import Kind, TraceEvent

SCENARIO = "scenarios/l4/crash_after_result_saved.toml"


def _scenario():
    return load(SCENARIO)


def test_the_reference_is_deterministic_and_the_first_run_is_reused():
    calls = []

    def counting_runner(*args, **kwargs):
        calls.append(1)
        return run_scenario(*args, **kwargs)

    recording = RecordingRunner(counting_runner)
    implementation = reference_impl.implementation()
    scenario = _scenario()
    recording(implementation, scenario, 5, time_limit_s=20.0, data_root=None)
    assert check_determinism(
        implementation, [scenario], 5, runner=counting_runner, first_traces=recording.traces
    ) == ()
    assert len(calls) == 2  # the suite's run plus exactly one more


def test_a_diverging_run_reports_the_first_different_event():
    implementation = reference_impl.implementation()
    state = {"runs": 0}

    def flaky_runner(impl, scenario, seed, **kwargs):
        run = run_scenario(impl, scenario, seed, **kwargs)
        state["runs"] += 1
        if state["runs"] == 2:  # the second run sees a different request id at event 7
            events = list(run.trace.events)
            events[7] = dataclasses.replace(events[7], data={**events[7].data, "request_id": "rq-other"})
            run = dataclasses.replace(run, trace=dataclasses.replace(run.trace, events=tuple(events)))
        return run

    divergences = check_determinism(implementation, [_scenario()], 0, runner=flaky_runner)
    assert len(divergences) == 1
    divergence = divergences[0]
    assert divergence.where == "event 7"
    assert "rq-other" in divergence.second and "rq-other" not in divergence.first
    assert divergence.first_digest != divergence.second_digest
    assert "NONDETERMINISTIC" in divergence.lines()[0]


def test_first_divergence_on_length_and_identical_traces():
    trace = run_scenario(reference_impl.implementation(), _scenario(), 0).trace
    assert first_divergence(trace, trace) is None
    shorter = dataclasses.replace(trace, events=trace.events[:-1])
    where, first, second = first_divergence(trace, shorter)
    assert where == "length"
    assert "next:" in first and f"{len(trace.events) - 1} events" in second
    extra = TraceEvent(len(trace.events), "harness", Kind.OBSERVED, 0, {})
    assert first_divergence(trace, dataclasses.replace(trace, events=trace.events + (extra,)))[0] == "length"
