"""Compare two ``run`` reports' verdicts scenario by scenario (a check that a change to the
judging kept every verdict and its evidence).

    python tools/compare_verdicts.py BEFORE/report.json AFTER/report.json [--digests]

Prints each scenario whose status, or any criterion's status, exercised count or evidence
(notes, trace indexes, ledger rows) differs, and exits 1 when any does; with ``--digests``
the trace digests are compared too (they differ across digest versions by design).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def _verdicts(scenario: dict[str, Any]) -> dict[str, Any]:
    return {v["criterion_id"]: (v["status"], v.get("exercised"), v.get("evidence"))
            for v in scenario.get("verdicts") or ()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--digests", action="store_true", help="compare trace digests too")
    args = parser.parse_args()
    with open(args.before, encoding="utf-8") as handle:
        before = {s["id"]: s for s in json.load(handle)["scenarios"]}
    with open(args.after, encoding="utf-8") as handle:
        after = {s["id"]: s for s in json.load(handle)["scenarios"]}
    differences = 0
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name), after.get(name)
        if a is None or b is None:
            print(f"{name}: only in {'after' if a is None else 'before'}")
            differences += 1
            continue
        lines = []
        if a["status"] != b["status"]:
            lines.append(f"  status {a['status']} -> {b['status']}")
        if args.digests and a.get("trace_digest") != b.get("trace_digest"):
            lines.append("  trace digest differs")
        va, vb = _verdicts(a), _verdicts(b)
        for criterion in sorted(set(va) | set(vb)):
            if va.get(criterion) != vb.get(criterion):
                lines.append(f"  {criterion}: {va.get(criterion)!r}\n      -> {vb.get(criterion)!r}")
        if lines:
            differences += 1
            print(name)
            print("\n".join(lines))
    print(f"{len(before)} scenarios before, {len(after)} after, {differences} differ")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
