"""Expectation files: criteria an implementation is known to fail, scenarios known to error.

In the spirit of web-platform-tests metadata, a TOML file lists what is known to go wrong,
each entry with a reason (and optionally a link to the tracking issue)::

    [[expected_fail]]
    criterion = "L4.1"
    reason = "re-executes a write after a crash between result-save and checkpoint"
    link = "https://tracker.example/RUNTIME-123"

    [[expected_error]]
    scenario = "l4-concurrent-duplicates"
    cause = "did not fire"
    reason = "no second instance yet: the hold of the concurrent turn is never reached"

Guarantees: a loaded file gives :class:`Expectations`: ``criteria`` maps criterion id →
reason text (the link appended), ``errors`` holds one :class:`ExpectedError` per
``[[expected_error]]`` entry; an invalid file raises
:class:`~harness.contract.errors.ExpectationsError` naming the file, the key and the fix.
Unknown criterion ids are rejected by the suite, which knows the catalogue; a scenario id no
scenario of a run has matches nothing (a partial run may leave it out).

What they mean in a run: a listed criterion is reported ``expected_fail`` and does not fail
the gate; if it passes, it is reported ``unexpected_pass`` so the file can be tightened. A
scenario that errors (status ``error``) with a listed ``cause`` in its error message is
reported ``expected_error`` and does not fail the gate either (it still counts as errored
for the conformance level, as an expected failure never buys the level); the same scenario
erroring for another cause is a new error; a listed scenario that does not error for that
cause at all is an *unexpected success*, which fails the gate in strict mode like an
unexpected pass. So an implementation that knows its gaps gates on "nothing new broke".
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from harness.contract.errors import ExpectationsError

_ENTRY_KEYS = {"criterion", "reason", "link"}
_ERROR_KEYS = {"scenario", "cause", "reason", "link"}
_TOP_KEYS = ("expected_fail", "expected_error")


@dataclass(frozen=True, slots=True)
class ExpectedError:
    """A scenario known to end in error, and the text its error message contains."""

    scenario: str
    """The scenario's id (a template variant's full id, ``base.key``)."""
    cause: str
    """Text the scenario's error message must contain (case-sensitive): pick a part that
    names the cause and stays the same from run to run, e.g. ``"fault 2: after_result_saved"``
    or ``"did not fire"``, not a pid or a path."""
    reason: str
    """Why it is expected (the link appended)."""

    def matches(self, scenario_id: str, error: str) -> bool:
        return scenario_id == self.scenario and self.cause in error

    def text(self) -> str:
        return f"{self.scenario} errors with {self.cause!r}: {self.reason}"


@dataclass(frozen=True, slots=True)
class Expectations:
    criteria: dict[str, str]
    """Criterion id → why it is expected to fail."""
    errors: tuple[ExpectedError, ...] = ()

    def error_for(self, scenario_id: str) -> tuple[ExpectedError, ...]:
        return tuple(e for e in self.errors if e.scenario == scenario_id)


def load_expectation_file(path: str | Path) -> Expectations:
    """Both kinds of entries of the file at ``path``."""
    path = Path(path)
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ExpectationsError(f"{path}: expectations file not found; pass an existing file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ExpectationsError(f"{path}: not valid TOML ({exc}); fix the syntax") from None
    unknown = set(document) - set(_TOP_KEYS)
    if unknown:
        raise ExpectationsError(
            f"{path}: unknown top-level key(s) {sorted(unknown)}; the keys are "
            "[[expected_fail]] (criteria) and [[expected_error]] (scenarios)"
        )
    return Expectations(_criteria(path, _tables(path, document, "expected_fail")),
                        _errors(path, _tables(path, document, "expected_error")))


def load_expectations(path: str | Path) -> dict[str, str]:
    """The ``[[expected_fail]]`` entries of the file at ``path``: criterion id → reason."""
    return load_expectation_file(path).criteria


def _tables(path: Path, document: dict[str, Any], key: str) -> list[Any]:
    entries = document.get(key, [])
    if not isinstance(entries, list):
        raise ExpectationsError(f"{path}: {key} must be an array of tables ([[{key}]])")
    return entries


def _reason(where: str, entry: dict[str, Any], what: str) -> str:
    reason = entry.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise ExpectationsError(f"{where}.reason: say why {what} (a non-empty string)")
    link = entry.get("link", "")
    if not isinstance(link, str):
        raise ExpectationsError(f"{where}.link: must be a string (a URL)")
    return f"{reason.strip()} ({link})" if link else reason.strip()


def _entry(where: str, entry: Any, keys: set[str], what: str) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise ExpectationsError(f"{where}: must be a table with {what}")
    extra = set(entry) - keys
    if extra:
        raise ExpectationsError(
            f"{where}: unknown key(s) {sorted(extra)}; valid keys: {', '.join(sorted(keys))}"
        )
    return entry


def _criteria(path: Path, entries: list[Any]) -> dict[str, str]:
    expectations: dict[str, str] = {}
    for position, raw in enumerate(entries, start=1):
        where = f"{path}: expected_fail[{position}]"
        entry = _entry(where, raw, _ENTRY_KEYS, "criterion and reason")
        criterion = entry.get("criterion")
        if not isinstance(criterion, str) or not criterion:
            raise ExpectationsError(f"{where}.criterion: give the criterion id as a string, e.g. \"L4.1\"")
        reason = _reason(where, entry, f"{criterion} is expected to fail")
        if criterion in expectations:
            raise ExpectationsError(f"{where}.criterion: {criterion} is listed twice; keep one entry")
        expectations[criterion] = reason
    return expectations


def _errors(path: Path, entries: list[Any]) -> tuple[ExpectedError, ...]:
    errors: list[ExpectedError] = []
    for position, raw in enumerate(entries, start=1):
        where = f"{path}: expected_error[{position}]"
        entry = _entry(where, raw, _ERROR_KEYS, "scenario, cause and reason")
        scenario, cause = entry.get("scenario"), entry.get("cause")
        if not isinstance(scenario, str) or not scenario:
            raise ExpectationsError(f"{where}.scenario: give the scenario's id as a string, "
                                    "e.g. \"l4-crash-after-result-saved\"")
        if not isinstance(cause, str) or not cause.strip():
            raise ExpectationsError(
                f"{where}.cause: give text the scenario's error message contains, e.g. "
                "\"did not fire\" or \"fault 2: after_result_saved\" (a non-empty string)")
        reason = _reason(where, entry, f"{scenario} is expected to error")
        if any(e.scenario == scenario and e.cause == cause for e in errors):
            raise ExpectationsError(f"{where}: {scenario} with cause {cause!r} is listed twice; "
                                    "keep one entry")
        errors.append(ExpectedError(scenario, cause, reason))
    return tuple(errors)


def check_known(expectations: Mapping[str, str], criterion_ids: Sequence[str],
                where: str = "expectations") -> None:
    """Raise ExpectationsError when ``expectations`` name a criterion not in the catalogue."""
    unknown = sorted(set(expectations) - set(criterion_ids))
    if unknown:
        raise ExpectationsError(
            f"{where}: unknown criterion id(s) {', '.join(unknown)}; valid ids: "
            f"{', '.join(criterion_ids)}"
        )
