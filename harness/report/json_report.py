"""``report.json``: the RunResult as JSON, the machine-readable report.

Guarantees: :func:`to_dict` is the RunResult's contract JSON (``harness.contract.to_json``)
plus the derived top-level ``gate_passed`` and ``conformance`` (the level reached: core met,
each optional feature met / failing / not claimed and whether it was declared and shown by
behaviour, required features unmet, the headline);
it validates against
``fixtures/report.schema.json`` (checked in tests); :func:`from_dict` rebuilds the exact
RunResult, so every other writer can work from a saved report.json. Keys are written
sorted, so the same result always gives the same bytes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from harness.contract import ContractError, from_json, to_json
from harness.report.atomic import write_text
from harness.report.indented_json import dumps_indented
from harness.report.result import RunResult

FILENAME = "report.json"
DERIVED_KEYS = ("gate_passed", "conformance")


def conformance_dict(result: RunResult) -> dict[str, Any]:
    level = result.conformance
    return {
        "headline": level.headline,
        "conformant": level.conformant,
        "level": level.level,
        "core_met": level.core_met,
        "core_criteria": list(level.core_criteria),
        "core_not_passed": list(level.core_not_passed),
        "claimed": list(level.claimed),
        "shown_not_declared": list(level.shown_not_declared),
        "not_claimed": list(level.not_claimed),
        "features": [
            {"feature": f.feature, "state": f.state.value, "criteria": list(f.criteria),
             "not_passed": list(f.not_passed), "required": f.required,
             "declared": f.declared, "shown": f.shown}
            for f in level.features
        ],
        "required": list(level.required),
        "required_unmet": list(level.required_unmet),
    }


def to_dict(result: RunResult) -> dict[str, Any]:
    data = to_json(result)
    data["gate_passed"] = result.gate_passed
    data["conformance"] = conformance_dict(result)
    return data


def dumps(result: RunResult) -> str:
    # json.dumps(..., indent=2, sort_keys=True, ensure_ascii=False), the same text, faster
    return dumps_indented(to_dict(result)) + "\n"


def from_dict(data: dict[str, Any]) -> RunResult:
    """The RunResult a report.json holds; ContractError names the bad path."""
    plain = {key: value for key, value in data.items() if key not in DERIVED_KEYS}
    return from_json(RunResult, plain)


def load(path: str | os.PathLike[str]) -> RunResult:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ContractError(f"{path}: cannot read a report.json ({exc})") from exc
    return from_dict(data)


def write(result: RunResult, report_dir: str | os.PathLike[str]) -> Path:
    return write_text(Path(report_dir) / FILENAME, dumps(result))
