"""The run's order starts every shared result before its readers (conftest.py): the rule as
a function over hand-made collections, and the order of this very session."""

from __future__ import annotations

import pytest

from .conftest import _params, _shared_results, starters_first

SUITE = ("reference_suite_run",)
PROFILE = ("profile_report",)


def test_the_first_asker_of_each_result_moves_to_the_front_in_collection_order():
    items = ["unit", "profile-a", "profile-b", "matrix", "suite-1", "suite-2", "wheel-1",
             "wheel-and-suite", "wheel-2", "last"]
    asks = [((), None), (PROFILE, "a"), (PROFILE, "b"), (PROFILE, None), (SUITE, None),
            (SUITE, None), (("wheel_env",), None), (("wheel_env", *SUITE), None),
            (("wheel_env",), None), ((), None)]
    assert starters_first(items, asks) == [
        "profile-a", "profile-b", "suite-1", "wheel-1",
        "unit", "matrix", "suite-2", "wheel-and-suite", "wheel-2", "last"]


def test_a_parametrization_asked_twice_is_started_once():
    items = ["a-1", "a-2", "plain"]
    # "a-2" asks for what "a-1" starts; "plain" asks, unparametrized, for a result no item
    # asks for parametrized: it starts it
    asks = [(PROFILE, "a"), (PROFILE, "a"), (SUITE, None)]
    assert starters_first(items, asks) == ["a-1", "plain", "a-2"]


def test_a_collection_without_shared_results_keeps_its_order():
    items = ["c", "a", "b"]
    assert starters_first(items, [((), None)] * 3) == items
    with pytest.raises(ValueError):  # one ask per item, never silently truncated
        starters_first(items, [((), None)] * 2)


def test_this_session_starts_its_shared_results_first(request):
    items = request.session.items
    asks = [(_shared_results(item), _params(item)) for item in items]
    if not any(names for names, _ in asks):
        pytest.skip("no test of this run reads a shared result (a targeted run)")
    assert asks[0][0], f"the run starts with {items[0].nodeid}, which starts no shared result"
    assert starters_first(items, asks) == items  # nothing left to move: the hook ran
