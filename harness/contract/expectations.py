"""Expectation files: criteria an implementation under test is known to fail.

In the spirit of web-platform-tests metadata, a TOML file lists criteria expected to fail,
each with a reason (and optionally a link to the tracking issue)::

    [[expected_fail]]
    criterion = "L4.1"
    reason = "re-executes a write after a crash between result-save and checkpoint"
    link = "https://tracker.example/RUNTIME-123"

Guarantees: a loaded file maps criterion id → reason text (the link appended); an invalid
file raises :class:`~harness.contract.errors.ExpectationsError` naming the file, the key and the fix.
Unknown criterion ids are rejected by the suite, which knows the catalogue. Such a criterion
is reported ``expected_fail`` and does not fail the gate; if it passes, it is reported
``unexpected_pass`` so the file can be tightened.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Mapping, Sequence

from harness.contract.errors import ExpectationsError

_ENTRY_KEYS = {"criterion", "reason", "link"}


def load_expectations(path: str | Path) -> dict[str, str]:
    path = Path(path)
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ExpectationsError(f"{path}: expectations file not found; pass an existing file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ExpectationsError(f"{path}: not valid TOML ({exc}); fix the syntax") from None
    unknown = set(document) - {"expected_fail"}
    if unknown:
        raise ExpectationsError(
            f"{path}: unknown top-level key(s) {sorted(unknown)}; the only key is [[expected_fail]]"
        )
    entries = document.get("expected_fail", [])
    if not isinstance(entries, list):
        raise ExpectationsError(f"{path}: expected_fail must be an array of tables ([[expected_fail]])")
    expectations: dict[str, str] = {}
    for position, entry in enumerate(entries, start=1):
        where = f"{path}: expected_fail[{position}]"
        if not isinstance(entry, dict):
            raise ExpectationsError(f"{where}: must be a table with criterion and reason")
        extra = set(entry) - _ENTRY_KEYS
        if extra:
            raise ExpectationsError(
                f"{where}: unknown key(s) {sorted(extra)}; valid keys: criterion, reason, link"
            )
        criterion = entry.get("criterion")
        reason = entry.get("reason")
        if not isinstance(criterion, str) or not criterion:
            raise ExpectationsError(f"{where}.criterion: give the criterion id as a string, e.g. \"L4.1\"")
        if not isinstance(reason, str) or not reason.strip():
            raise ExpectationsError(
                f"{where}.reason: say why {criterion} is expected to fail (a non-empty string)"
            )
        link = entry.get("link", "")
        if not isinstance(link, str):
            raise ExpectationsError(f"{where}.link: must be a string (a URL)")
        if criterion in expectations:
            raise ExpectationsError(f"{where}.criterion: {criterion} is listed twice; keep one entry")
        expectations[criterion] = f"{reason.strip()} ({link})" if link else reason.strip()
    return expectations


def check_known(expectations: Mapping[str, str], criterion_ids: Sequence[str],
                where: str = "expectations") -> None:
    """Raise ExpectationsError when ``expectations`` name a criterion not in the catalogue."""
    unknown = sorted(set(expectations) - set(criterion_ids))
    if unknown:
        raise ExpectationsError(
            f"{where}: unknown criterion id(s) {', '.join(unknown)}; valid ids: "
            f"{', '.join(criterion_ids)}"
        )
