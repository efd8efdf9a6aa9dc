"""``lifecycle-harness compare``: the criterion × implementation matrix of saved reports.

Guarantees: :func:`compare` reads only the given ``report.json`` documents (dicts) and
returns a :class:`Comparison` of pandas frames: one row per (criterion, implementation)
with its status, violation count and explanation (a profile's divergence entry or an
expectation file's reason), the matrix (criterion × implementation, status and violation
count per cell), a per-stage summary (criteria passed / total per implementation), and,
for every implementation with two or more reports, the diff from each report to the next
(criteria newly failing, newly passing, newly not exercised). The Markdown and HTML
renderings are functions of the Comparison alone, with rows in catalogue order and columns
in the order the reports were given, so the same reports always give the same bytes.

A report that is not a harness report.json is refused with a one-line
:class:`~harness.contract.errors.UsageError` naming the file and the key; pandas comes from the
``matrix`` extra, and its absence is reported by name, never as a traceback.
"""

from __future__ import annotations

import argparse
import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from harness.contract.errors import EXIT_OK, UsageError

if TYPE_CHECKING:  # pragma: no cover
    import pandas

PASSING = frozenset({"passed"})
FAILING = frozenset({"failed", "error", "expected_fail"})
NOT_EXERCISED = "not_exercised"
_SHORT = {"passed": "pass", "failed": "FAIL", "error": "ERROR", "not_exercised": "not exercised",
          "not_applicable": "n/a", "expected_fail": "diverges", "unexpected_pass": "unexpected pass"}


def require_pandas() -> Any:
    try:
        import pandas
    except ImportError:
        raise UsageError(
            "the matrix needs pandas, which is not installed; install the extra: "
            "pip install -e '.[matrix]'"
        ) from None
    return pandas


@dataclass(frozen=True, slots=True)
class Report:
    """One report.json, reduced to what the matrix shows."""

    label: str
    """The column name: the implementation's name, with ``#N`` for its Nth report."""
    implementation: str
    source: str
    criteria: tuple[dict[str, Any], ...]
    """``{id, stage, title, status, violations, explanation}`` in catalogue order."""


def read_report(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{path}: report not found; pass the report.json a run wrote "
                         "(--report-dir)") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: not a readable JSON report ({exc}); pass a report.json "
                         "written by `lifecycle-harness run`") from None
    return data


def to_report(data: Any, source: str, label: str = "") -> Report:
    """Check the keys the matrix needs and keep them; UsageError names what is missing."""
    def bad(where: str, fix: str) -> UsageError:
        return UsageError(f"{source}: {where} {fix}; pass a report.json written by "
                          "`lifecycle-harness run`")

    if not isinstance(data, dict):
        raise bad("the document", "is not a JSON object")
    name = (data.get("implementation") or {}).get("name") if isinstance(
        data.get("implementation"), dict) else None
    if not isinstance(name, str) or not name:
        raise bad("implementation.name", "is missing")
    criteria = data.get("criteria")
    if not isinstance(criteria, list) or not criteria:
        raise bad("criteria", "is missing or empty")
    kept = []
    for position, item in enumerate(criteria):
        if not isinstance(item, dict) or not all(
                isinstance(item.get(key), str) for key in ("id", "stage", "status")):
            raise bad(f"criteria[{position}]", "lacks a string id, stage or status")
        violations = item.get("violations", [])
        kept.append({
            "id": item["id"], "stage": item["stage"], "title": str(item.get("title", "")),
            "status": item["status"],
            "violations": len(violations) if isinstance(violations, list) else 0,
            "explanation": str(item.get("expectation_reason", "") or ""),
        })
    return Report(label or name, name, source, tuple(kept))


def labelled(reports: Sequence[tuple[Any, str]]) -> list[Report]:
    """Reports with their column labels: a name given twice gets ``#1``, ``#2``..."""
    names = [to_report(data, source).implementation for data, source in reports]
    seen: dict[str, int] = {}
    result = []
    for (data, source), name in zip(reports, names):
        seen[name] = seen.get(name, 0) + 1
        label = f"{name} #{seen[name]}" if names.count(name) > 1 else name
        result.append(to_report(data, source, label))
    return result


@dataclass(frozen=True, slots=True)
class Comparison:
    cells: "pandas.DataFrame"
    """One row per (criterion, implementation): stage, title, status, violations, explanation."""
    matrix: "pandas.DataFrame"
    """Criterion × implementation, each cell ``status`` (and ``×N`` violations)."""
    stages: "pandas.DataFrame"
    """Stage × implementation, each cell ``passed/total``."""
    diffs: "pandas.DataFrame"
    """implementation, before, after, change (newly failing|passing|not exercised), criterion."""


def compare(reports: Sequence[Report]) -> Comparison:
    pandas = require_pandas()
    if not reports:
        raise UsageError("compare needs at least one report.json")
    rows = [
        {"criterion": c["id"], "stage": c["stage"], "title": c["title"], "implementation": r.label,
         "status": c["status"], "violations": c["violations"], "explanation": c["explanation"]}
        for r in reports for c in r.criteria
    ]
    cells = pandas.DataFrame(rows, columns=["criterion", "stage", "title", "implementation",
                                            "status", "violations", "explanation"])
    order = list(dict.fromkeys(cells["criterion"]))
    columns = [r.label for r in reports]
    shown = cells.assign(cell=[_cell(s, v) for s, v in zip(cells["status"], cells["violations"])])
    matrix = (shown.pivot(index="criterion", columns="implementation", values="cell")
              .reindex(index=order, columns=columns).fillna("—"))
    passed = cells.assign(passed=cells["status"].isin(PASSING))
    grouped = passed.groupby(["stage", "implementation"], sort=False)["passed"]
    totals = grouped.agg(["sum", "count"]).reset_index()
    totals["cell"] = [f"{int(s)}/{int(n)}" for s, n in zip(totals["sum"], totals["count"])]
    stage_order = list(dict.fromkeys(cells["stage"]))
    stages = (totals.pivot(index="stage", columns="implementation", values="cell")
              .reindex(index=stage_order, columns=columns).fillna("—"))
    return Comparison(cells, matrix, stages, _diffs(pandas, reports))


def _cell(status: str, violations: int) -> str:
    text = _SHORT.get(status, status)
    return f"{text} ×{violations}" if violations else text


def _diffs(pandas: Any, reports: Sequence[Report]) -> "pandas.DataFrame":
    rows = []
    by_name: dict[str, list[Report]] = {}
    for report in reports:
        by_name.setdefault(report.implementation, []).append(report)
    for name, runs in by_name.items():
        for before, after in zip(runs, runs[1:]):
            old = {c["id"]: c["status"] for c in before.criteria}
            for c in after.criteria:
                change = _change(old.get(c["id"]), c["status"])
                if change:
                    rows.append({"implementation": name, "before": before.label,
                                 "after": after.label, "change": change, "criterion": c["id"],
                                 "was": old.get(c["id"]) or "absent", "now": c["status"]})
    return pandas.DataFrame(rows, columns=["implementation", "before", "after", "change",
                                           "criterion", "was", "now"])


def _change(was: str | None, now: str) -> str:
    if now == was:
        return ""
    if now in FAILING and was not in FAILING:
        return "newly failing"
    if now in PASSING:
        return "newly passing"
    if now == NOT_EXERCISED:
        return "newly not exercised"
    return ""


# --------------------------------------------------------------------------- renderings


def explanations(comparison: Comparison) -> list[tuple[str, str, str]]:
    """(implementation, criterion, explanation) of every cell that carries one."""
    cells = comparison.cells
    explained = cells[cells["explanation"] != ""]
    return [(str(i), str(c), str(e)) for i, c, e in
            zip(explained["implementation"], explained["criterion"], explained["explanation"])]


def to_markdown(comparison: Comparison) -> str:
    lines = ["### Criterion × implementation", ""]
    lines += _md_table(comparison.matrix, "criterion")
    lines += ["", "### Per stage (criteria passed / total)", ""]
    lines += _md_table(comparison.stages, "stage")
    notes = explanations(comparison)
    if notes:
        lines += ["", "### Explanations (the profile's divergence table or expectations)", ""]
        lines += [f"- **{impl}** {crit}: {_md_escape(text)}" for impl, crit, text in notes]
    if len(comparison.diffs):
        lines += ["", "### Changes between runs of the same implementation", ""]
        for row in comparison.diffs.itertuples(index=False):
            lines.append(f"- {row.before} → {row.after}: {row.change} {row.criterion} "
                         f"({row.was} → {row.now})")
    return "\n".join(lines) + "\n"


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(frame: "pandas.DataFrame", index_name: str) -> list[str]:
    header = [index_name, *[str(c) for c in frame.columns]]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for index, row in frame.iterrows():
        lines.append("| " + " | ".join([str(index), *(_md_escape(str(v)) for v in row)]) + " |")
    return lines


def to_html(comparison: Comparison) -> str:
    parts = ["<!doctype html><html><head><meta charset='utf-8'>"
             "<title>lifecycle-harness matrix</title></head><body>",
             "<h2>Criterion × implementation</h2>", comparison.matrix.to_html(escape=True),
             "<h2>Per stage (criteria passed / total)</h2>", comparison.stages.to_html(escape=True)]
    notes = explanations(comparison)
    if notes:
        parts.append("<h2>Explanations</h2><ul>")
        parts += [f"<li><b>{html.escape(i)}</b> {html.escape(c)}: {html.escape(t)}</li>"
                  for i, c, t in notes]
        parts.append("</ul>")
    if len(comparison.diffs):
        parts += ["<h2>Changes between runs</h2>", comparison.diffs.to_html(escape=True, index=False)]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def to_dict(comparison: Comparison) -> dict[str, Any]:
    return {
        "matrix": {str(c): {str(k): str(v) for k, v in comparison.matrix[c].items()}
                   for c in comparison.matrix.columns},
        "cells": comparison.cells.to_dict(orient="records"),
        "stages": {str(c): {str(k): str(v) for k, v in comparison.stages[c].items()}
                   for c in comparison.stages.columns},
        "diffs": comparison.diffs.to_dict(orient="records"),
    }
