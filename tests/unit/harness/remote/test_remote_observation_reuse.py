"""Inspect answers decoded with the previous reading's objects reused: the same value as a
fresh decoding (and the same errors), the same objects for what did not change; and the
reference's server encodes a reading exactly as ``to_json`` does."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.contract import (
    ContractError,
    Mode,
    Observation,
    SessionView,
    TurnStatus,
    from_json,
    to_json,
)
from harness.remote.observation_reuse import ObservationReuse
from reference_impl.remote import ReadingEncoder


def _session(session_id: str, permission_version: int = 1) -> dict:
    return to_json(SessionView(session_id=session_id, turn_status=TurnStatus("idle"),
                               permission_version=permission_version, mode=Mode("default"),
                               interactive=True))


@pytest.fixture
def reading():
    return {"sessions": [_session("s1"), _session("s2")], "failure_events_logged": 3,
            "result_records": 1}


def test_an_identical_answer_is_the_same_observation(reading):
    reuse = ObservationReuse()
    first = reuse.decode(reading, "inspect.result")
    assert first == from_json(Observation, reading)
    assert reuse.decode(copy.deepcopy(reading), "inspect.result") is first


def test_a_changed_answer_reuses_only_the_unchanged_rows(reading):
    reuse = ObservationReuse()
    first = reuse.decode(reading, "inspect.result")
    changed = copy.deepcopy(reading)
    changed["sessions"][1] = _session("s2", permission_version=2)
    changed["sessions"].append(_session("s3"))
    second = reuse.decode(changed, "inspect.result")
    assert second == from_json(Observation, changed) and second is not first
    assert second.sessions[0] is first.sessions[0]
    assert second.sessions[1] is not first.sessions[1]
    assert second.sessions[1].permission_version == 2


def test_equal_rows_in_one_reading_stay_distinct_objects(reading):
    reuse = ObservationReuse()
    twice = {"sessions": [_session("s1"), _session("s1")]}
    first = reuse.decode(twice, "r")
    assert first.sessions[0] is not first.sessions[1]
    again = reuse.decode({"sessions": [_session("s1"), _session("s1")], "result_records": 2}, "r")
    assert {id(row) for row in again.sessions} == {id(row) for row in first.sessions}


def test_a_different_json_type_is_decoded_again_not_reused(reading):
    """1 and 1.0 and true compare equal in Python; the reuse goes by exact text."""
    reuse = ObservationReuse()
    reuse.decode(reading, "r")
    as_float = copy.deepcopy(reading)
    as_float["failure_events_logged"] = 3.0
    with pytest.raises(ContractError) as theirs:
        from_json(Observation, as_float, "r")
    with pytest.raises(ContractError) as mine:
        reuse.decode(as_float, "r")
    assert str(mine.value) == str(theirs.value)


def test_a_row_with_a_different_json_type_is_decoded_again_not_reused(reading):
    reuse = ObservationReuse()
    reuse.decode(reading, "r")
    as_int = copy.deepcopy(reading)
    as_int["sessions"][0]["interactive"] = 1  # equal to True in Python, another JSON value
    with pytest.raises(ContractError) as theirs:
        from_json(Observation, as_int, "r")
    with pytest.raises(ContractError) as mine:
        reuse.decode(as_int, "r")
    assert str(mine.value) == str(theirs.value)


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 2) | st.floats(allow_nan=False)
    | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                max_size=3),
    max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(_json, _json)
def test_the_row_text_is_as_exact_as_the_json_text(first, second):
    """Rows are told apart by repr of their decoded data: the same verdict as comparing
    their exact JSON texts."""
    def as_json(value):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    assert (repr(first) == repr(second)) == (as_json(first) == as_json(second))
    assert repr(json.loads(as_json(first))) == repr(first)


@pytest.mark.parametrize("bad", [
    [], {"sessions": "x"}, {"bogus": 1}, {"sessions": [{"session_id": 3}]},
    {"sessions": [{"nope": 1}]},
])
def test_bad_answers_fail_with_the_same_error_as_a_fresh_decoding(reading, bad):
    reuse = ObservationReuse()
    reuse.decode(reading, "r")
    with pytest.raises(ContractError) as theirs:
        from_json(Observation, bad, "r")
    with pytest.raises(ContractError) as mine:
        reuse.decode(bad, "r")
    assert str(mine.value) == str(theirs.value)


def test_forget_drops_the_reading(reading):
    reuse = ObservationReuse()
    first = reuse.decode(reading, "r")
    reuse.forget()
    assert reuse.decode(reading, "r") is not first


def test_the_reference_encodes_a_reading_as_to_json_and_reuses_unchanged_rows(reading):
    encoder = ReadingEncoder()
    observation = from_json(Observation, reading)
    data = encoder.encode(observation)
    assert data == to_json(observation)
    assert encoder.encode(observation) is data
    grown = Observation(sessions=(*observation.sessions,
                                  from_json(SessionView, _session("s9"))), result_records=4)
    again = encoder.encode(grown)
    assert again == to_json(grown)
    assert again["sessions"][0] is data["sessions"][0]  # the unchanged row's encoding


def test_the_reference_reuses_the_encoding_of_a_part_handed_back_unchanged(reading):
    encoder = ReadingEncoder()
    observation = from_json(Observation, reading)
    data = encoder.encode(observation)
    # A new reading whose sessions are the very tuple of the last one; the rest changed.
    moved = Observation(sessions=observation.sessions, result_records=4)
    again = encoder.encode(moved)
    assert again == to_json(moved)
    assert again["sessions"] is data["sessions"]
    # An equal tuple that is another object is encoded again (identity, not equality).
    copied = Observation(sessions=tuple(observation.sessions), result_records=4)
    copy_data = encoder.encode(Observation(sessions=tuple(list(observation.sessions)),
                                           result_records=5))
    assert copy_data == to_json(copied) | {"result_records": 5}
    # and still reuses the rows' own encodings
    assert copy_data["sessions"][0] is data["sessions"][0]


# --------------------------------------------------------------------------- inspect_since


def test_unchanged_for_the_token_sent_is_the_latest_reading(reading):
    reuse, issuer = ObservationReuse(), object()
    assert reuse.since(issuer) == ""
    first = reuse.decode_since(issuer, "", {"reading": "7", "observation": reading}, "r")
    assert first == from_json(Observation, reading)
    assert reuse.since(issuer) == "7" and reuse.since(object()) == ""
    assert reuse.decode_since(issuer, "7", {"reading": "7", "observation": None}, "r") is first
    assert reuse.decode_since(issuer, "7", {"reading": "7"}, "r") is first


@pytest.mark.parametrize("since, answer", [
    ("", {"reading": "7", "observation": None}),      # unchanged, but nothing was named
    ("7", {"reading": "8", "observation": None}),     # unchanged since another reading
    ("7", {"reading": "", "observation": None}),
    ("7", {"reading": 7, "observation": None}),
    ("7", {"observation": None}),
    ("7", {"reading": "7", "observation": None, "extra": 1}),
    ("7", ["7", None]),
])
def test_an_unchanged_it_cannot_stand_behind_is_a_contract_error(reading, since, answer):
    reuse, issuer = ObservationReuse(), object()
    reuse.decode_since(issuer, "", {"reading": "7", "observation": reading}, "r")
    with pytest.raises(ContractError):
        reuse.decode_since(issuer, since, answer, "r")


def test_unchanged_before_any_reading_is_a_contract_error():
    with pytest.raises(ContractError, match="unchanged"):
        ObservationReuse().decode_since(object(), "7", {"reading": "7"}, "r")


# --------------------------------------------------------------------------- inspect_parts


def test_parts_said_unchanged_are_the_latest_reading_s_very_tuples(reading):
    reuse, issuer = ObservationReuse(), object()
    first = reuse.decode_parts(issuer, "", {"reading": "7", "observation": reading}, "r")
    assert first == from_json(Observation, reading)
    changed = {"failure_events_logged": 4, "result_records": 1}
    second = reuse.decode_parts(issuer, "7", {"reading": "8", "observation": changed,
                                              "unchanged": ["sessions"]}, "r")
    assert second == from_json(Observation, {**reading, **changed})
    assert second.sessions is first.sessions
    assert reuse.since(issuer) == "8"
    # The same reading again, whole: the same object; a part left out without being named
    # unchanged is its default, as a fresh decoding of that answer gives.
    whole = reuse.decode_parts(issuer, "8", {"reading": "9",
                                             "observation": {**reading, **changed}}, "r")
    assert whole is second
    bare = reuse.decode_parts(issuer, "9", {"reading": "10", "observation": changed}, "r")
    assert bare == from_json(Observation, changed) and bare.sessions == ()
    assert reuse.decode_parts(issuer, "10", {"reading": "10", "observation": None}, "r") is bare


@pytest.mark.parametrize("since, answer", [
    ("", {"reading": "8", "observation": {}, "unchanged": ["sessions"]}),   # nothing named
    ("7", {"reading": "8", "observation": {}, "unchanged": ["result_records"]}),  # not a part
    ("7", {"reading": "8", "observation": {}, "unchanged": ["bogus"]}),
    ("7", {"reading": "8", "observation": {}, "unchanged": ["sessions", "sessions"]}),
    ("7", {"reading": "8", "observation": {}, "unchanged": "sessions"}),
    ("7", {"reading": "8", "observation": {"sessions": []}, "unchanged": ["sessions"]}),
    ("7", {"reading": "7", "observation": None, "unchanged": ["sessions"]}),
    ("7", {"reading": "8", "observation": {}, "unchanged": [], "extra": 1}),
])
def test_parts_unchanged_it_cannot_stand_behind_are_a_contract_error(reading, since, answer):
    reuse, issuer = ObservationReuse(), object()
    reuse.decode_parts(issuer, "", {"reading": "7", "observation": reading}, "r")
    with pytest.raises(ContractError):
        reuse.decode_parts(issuer, since, answer, "r")


def test_inspect_since_answers_may_not_name_parts(reading):
    reuse, issuer = ObservationReuse(), object()
    reuse.decode_since(issuer, "", {"reading": "7", "observation": reading}, "r")
    with pytest.raises(ContractError):
        reuse.decode_since(issuer, "7", {"reading": "8", "observation": {},
                                         "unchanged": ["sessions"]}, "r")


class _QuietWorld:
    """What opening the reference and a session asks of a world."""

    def now(self):
        return 0.0

    def emit(self, event):
        pass

    def failpoint(self, name, context):
        pass


def test_the_reference_leaves_out_the_parts_it_hands_back_unchanged(tmp_path):
    from harness.contract import SessionConfig
    from harness.remote.protocol import DRIVER_METHODS, PORT_METHODS, Endpoint, StreamTransport
    from reference_impl import implementation
    from reference_impl.remote import Server

    impl = implementation()
    endpoint = Endpoint(StreamTransport(None, None), incoming=DRIVER_METHODS,
                        outgoing=PORT_METHODS, handlers={})
    server = Server(impl, endpoint)
    assert server.do_initialize(1, 1).inspect_parts
    runtime = impl.open(str(tmp_path), _QuietWorld())
    runtime.open_session(SessionConfig("s1"))
    encode = endpoint.encoders["inspect_parts"]
    reuse, issuer = ObservationReuse(), object()

    def read(since):
        data = json.loads(json.dumps(encode(server.do_inspect_parts(str(tmp_path), since))))
        return data, reuse.decode_parts(issuer, since, data, "r")

    first, observation = read("")
    assert first["unchanged"] == [] and observation == impl.inspect(str(tmp_path))
    same, again = read(first["reading"])
    assert same["observation"] is None and again is observation
    runtime.open_session(SessionConfig("s2"))
    changed, latest = read(same["reading"])
    assert "sessions" not in changed["unchanged"] and "sessions" in changed["observation"]
    assert changed["unchanged"] and not set(changed["unchanged"]) & set(changed["observation"])
    assert latest == impl.inspect(str(tmp_path))
    for name in changed["unchanged"]:
        assert getattr(latest, name) is getattr(observation, name)
    # A token that is not the last one gets the whole reading.
    stale = encode(server.do_inspect_parts(str(tmp_path), first["reading"]))
    assert stale["unchanged"] == [] and stale["observation"] is not None
    runtime.close()
