"""Text-edit mutants apply exactly, swap only what they edit, and undo themselves."""

import pytest

from harness.mutants.source_patch import MutantError, edit, edits
from reference_impl import failure_policy


def test_an_edit_swaps_the_function_and_restores_it_on_exit():
    original = failure_policy.dedup_key
    args = {"command": "ls", "description": "list"}
    reference_key = failure_policy.dedup_key("Bash", None, args)
    keeps_description = edits(edit(
        "reference_impl.failure_policy",
        find="    if is_bash(tool, kind):\n        args = {name",
        replace="    if False:\n        args = {name",
    ))
    with keeps_description():
        assert failure_policy.dedup_key is not original
        assert failure_policy.dedup_key("Bash", None, args) != reference_key
        # everything else keeps its identity: the mutated function sees the same helpers
        assert failure_policy.dedup_key.__globals__["args_digest"] is failure_policy.args_digest
        with keeps_description():  # re-entrant (a runtime call inside a runtime call)
            assert failure_policy.dedup_key("Bash", None, args) != reference_key
        assert failure_policy.dedup_key("Bash", None, args) != reference_key
    assert failure_policy.dedup_key is original
    assert failure_policy.dedup_key("Bash", None, args) == reference_key


def test_a_find_text_that_does_not_occur_exactly_once_is_refused():
    missing = edits(edit("reference_impl.failure_policy", find="no such text anywhere", replace="x"))
    with pytest.raises(MutantError, match="occurs 0 times"):
        with missing():
            pass
    ambiguous = edits(edit("reference_impl.failure_policy", find="return ", replace="return "))
    with pytest.raises(MutantError, match="must be exactly once"):
        with ambiguous():
            pass


def test_an_edit_outside_any_function_is_refused():
    header = edits(edit("reference_impl.failure_policy", find="from __future__ import annotations",
                        replace="from __future__ import annotations"))
    with pytest.raises(MutantError, match="must lie inside"):
        with header():
            pass
