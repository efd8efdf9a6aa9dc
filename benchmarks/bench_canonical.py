"""Canonical JSON (RFC 8785) on the values the harness really encodes: the cost of
``harness.contract.canonical_json`` and ``canonical_text`` against the Python text it replaced
(``json.dumps(sort_keys, compact, ensure_ascii=False)``) and against the ``rfc8785`` library.

    python benchmarks/bench_canonical.py [--scenarios N] [--json PATH]

Runs every Nth bundled scenario on the reference, takes the JSON data of every lifecycle
event and every operation row of the traces, and times each encoder over all of them in
process time (best of seven, interleaved, so a loaded machine shifts all alike). Prints the
ratios; writes benchmarks/results/canonical.json. Why the harness writes RFC 8785 itself
instead of calling the library: the library's ratio here.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import reference_impl  # noqa: E402
from harness import contract as c  # noqa: E402
from harness.contract.canonical_text import canonical_text  # noqa: E402
from harness.running.runner import run_scenario  # noqa: E402
from harness.scenarios.loader import DEFAULT_SCENARIO_DIR, discover  # noqa: E402

_PYTHON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode


def _best(fn: Callable[[Any], Any], values: list[Any]) -> float:
    start = time.process_time()
    for value in values:
        fn(value)
    return time.process_time() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", type=int, default=10, help="take every Nth scenario")
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "results" / "canonical.json"))
    args = parser.parse_args()
    rows: list[Any] = []
    for scenario in discover([DEFAULT_SCENARIO_DIR])[::args.scenarios]:
        trace = run_scenario(reference_impl.implementation(), scenario, 0).trace
        rows.extend(trace.events)
        rows.extend(trace.observations[-1].observation.operations if trace.observations else ())
    data = [c.to_json(row) for row in rows]
    floats = sum(1 for value in data if c.canonical_json(value) != _PYTHON(value))
    encoders: dict[str, tuple[Callable[[Any], Any], list[Any]]] = {
        "python_text": (_PYTHON, data),
        "canonical_json": (c.canonical_json, data),
        "canonical_text": (canonical_text, rows),
    }
    try:
        import rfc8785
        encoders["rfc8785_library"] = (rfc8785.dumps, data)
    except ImportError:
        print("(rfc8785 not installed: pip install 'lifecycle-harness[test]')")
    times: dict[str, list[float]] = {name: [] for name in encoders}
    for _ in range(7):
        for name, (fn, values) in encoders.items():
            times[name].append(_best(fn, values))
    best = {name: min(found) for name, found in times.items()}
    base = best["python_text"]
    print(f"{len(data)} values ({floats} written otherwise than the Python text: floats), "
          f"{sum(len(_PYTHON(v)) for v in data) / 1e6:.1f} MB of text")
    for name, seconds in best.items():
        print(f"  {name:16} {seconds * 1e3:8.1f} ms  {seconds / base:5.2f}x the Python text")
    Path(args.json).write_text(json.dumps({
        "values": len(data), "values_with_floats": floats,
        "ms": {name: round(seconds * 1e3, 2) for name, seconds in best.items()},
        "ratio_to_python_text": {name: round(seconds / base, 3) for name, seconds in best.items()},
    }, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
