"""flat_key: equal keys only for rows whose fields have the same types and values; the
canonical text and the store probe's check remembered by it give what they give uncached."""

from __future__ import annotations

import dataclasses

import harness.contract as c
from harness.contract import canonical_json, to_json
from harness.running.driving.store_probe import CheckedParts
from harness.trace.flat_rows import flat_key
from harness.trace.record import ObservationPoint, Trace, TraceMeta, trace_canonical_json


def _checkpoint(**changes):
    base = dict(session_id="s1", format_version=1, sequence=3, failure_entries=0,
                size_bytes=120, last_execution_id="e1")
    base.update(changes)
    return c.CheckpointView(**base)


def test_equal_flat_rows_share_a_key_and_types_tell_equal_values_apart():
    assert flat_key(_checkpoint()) == flat_key(_checkpoint())
    assert flat_key(_checkpoint()) != flat_key(_checkpoint(sequence=4))
    assert _checkpoint(format_version=True) == _checkpoint()  # equal as dataclasses...
    assert flat_key(_checkpoint(format_version=True)) != flat_key(_checkpoint())  # ...not here
    entry = c.FailureEntryView("s1", "k", "bash", c.FailureKind.TRANSIENT, 2, "e1")
    assert flat_key(entry) is not None
    assert flat_key(dataclasses.replace(entry, failure_kind="transient")) != flat_key(entry)


def test_floats_containers_and_other_types_have_no_key():
    assert flat_key(_checkpoint(size_bytes=1.0)) is None  # 0.0 == -0.0, different texts
    assert flat_key(c.Observation()) is None  # tuples inside
    assert flat_key("text") is None and flat_key(3) is None and flat_key(None) is None

    @dataclasses.dataclass
    class Mutable:
        a: int
        b: int

    assert flat_key(Mutable(1, 2)) is None

    class Name(str):
        pass

    assert flat_key(_checkpoint(session_id=Name("s1"))) is None


def _trace(*observations: c.Observation) -> Trace:
    meta = TraceMeta(scenario_id="t", stage="x", seed=0, implementation="i", features=(),
                     thresholds=c.Thresholds(), sessions=(), tools=(), faults=())
    points = tuple(ObservationPoint(i, "quiescent", o) for i, o in enumerate(observations))
    return Trace(meta, (), points)


def test_the_canonical_text_of_equal_rows_of_other_types_is_their_own():
    one, true, again = _checkpoint(), _checkpoint(format_version=True), _checkpoint()
    trace = _trace(c.Observation(checkpoints=(one,)), c.Observation(checkpoints=(true,)),
                   c.Observation(checkpoints=(again, _checkpoint(size_bytes=-0.0))),
                   c.Observation(checkpoints=(_checkpoint(size_bytes=0.0),)))
    text = trace_canonical_json(trace)
    assert text == canonical_json(to_json(trace))
    assert '"format_version":true' in text
    # -0.0 and 0.0 are the number 0 in canonical JSON (RFC 8785), as the int 0 is
    assert '"size_bytes":-0' not in text and '"size_bytes":0.0' not in text


def test_the_probe_check_remembers_a_passed_row_for_its_field_type_and_exact_types_only():
    parts = CheckedParts()
    assert parts.fit(c.Observation(checkpoints=(_checkpoint(),)))
    assert parts.fit(c.Observation(checkpoints=(_checkpoint(),)))  # a new, equal row
    # equal to a passed row, but a bool where an int belongs: still checked, and refused
    assert not parts.fit(c.Observation(checkpoints=(_checkpoint(format_version=True),)))
    # a row that passed as a checkpoint is no failure-table row
    assert not parts.fit(c.Observation(failure_table=(_checkpoint(),)))  # type: ignore[arg-type]
    assert parts.fit(c.Observation(checkpoints=(_checkpoint(sequence=9),)))
