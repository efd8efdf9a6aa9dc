"""Splitting a run's cases over machines, and what each shard writes for :mod:`harness.campaigns.merge`.

Guarantees:

* :func:`assign` puts every case in exactly one of ``count`` shards, deterministically from
  the case ids alone (``sha256(case id) mod count``) — or, given a previous run's durations,
  by longest-first greedy balancing (cases in order of duration, longest first, ties by id,
  each to the least loaded shard, ties to the lower shard; a case the durations do not name
  counts as their mean). Every shard computes the same assignment from the same inputs, so
  no coordinator is needed;
* :func:`select` keeps the cases of one shard in their original order;
* :data:`SHARD_FILE` (``shard.json``) in a shard's report dir records the command kind, the
  shard, the ids of *all* cases in unsharded order and the ids this shard ran — what merge
  needs to check that the shards are complete and disjoint and to restore the order;
* :data:`DURATIONS_FILE` (``durations.json``) is written in every run's report dir (case id →
  seconds); pass it to ``--durations`` next time to balance the shards.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence, TypeVar

from harness.contract.errors import UsageError

T = TypeVar("T")

SHARD_FILE = "shard.json"
DURATIONS_FILE = "durations.json"
SHARD_FORMAT = "lifecycle-harness-shard/1"


@dataclass(frozen=True, slots=True)
class ShardSpec:
    """Shard ``index`` (1-based) of ``count``."""

    index: int
    count: int

    def text(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> ShardSpec:
    """``"I/N"`` with 1 <= I <= N (an argparse type: errors say what to give instead)."""
    parts = str(text).split("/")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not I/N; give the shard number and the shard count, e.g. 1/4")
    index, count = int(parts[0]), int(parts[1])
    if count < 1 or not 1 <= index <= count:
        raise argparse.ArgumentTypeError(
            f"{text!r}: the shard number must be between 1 and the count (>= 1), e.g. 1/{max(count, 1)}")
    return ShardSpec(index, count)


def add_shard_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--shard", type=parse_shard, default=None, metavar="I/N",
        help="run only shard I of N (1-based; split by a stable hash of the case id, or "
        "balanced by --durations); combine the shards' report dirs with `lifecycle-harness "
        "merge`",
    )
    parser.add_argument(
        "--durations", metavar="FILE", default=None,
        help=f"a previous run's {DURATIONS_FILE} (written in every report dir): balance the "
        "shards by these case durations instead of the hash",
    )


def check_shard_options(args: argparse.Namespace) -> None:
    """``--durations`` balances shards: alone it would do nothing, so it is a usage error."""
    if getattr(args, "durations", None) and getattr(args, "shard", None) is None:
        raise UsageError("--durations balances the shards of --shard I/N; add --shard (or "
                         "drop --durations)")


def stable_shard(case_id: str, count: int) -> int:
    """0-based shard of one case by hash (the same on every machine and Python)."""
    digest = hashlib.sha256(case_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count


def assign(case_ids: Sequence[str], count: int,
           durations: Mapping[str, float] | None = None) -> list[int]:
    """0-based shard of each case (see the module docstring)."""
    if not durations:
        return [stable_shard(case_id, count) for case_id in case_ids]
    known = [float(durations[c]) for c in case_ids if c in durations]
    fallback = sum(known) / len(known) if known else 1.0
    cost = {c: float(durations.get(c, fallback)) for c in case_ids}
    loads = [0.0] * count
    chosen: dict[str, int] = {}
    for case_id in sorted(set(case_ids), key=lambda c: (-cost[c], c)):
        target = min(range(count), key=lambda i: (loads[i], i))
        chosen[case_id] = target
        loads[target] += cost[case_id]
    return [chosen[c] for c in case_ids]


def select(items: Sequence[T], case_ids: Sequence[str], spec: ShardSpec | None,
           durations: Mapping[str, float] | None = None) -> list[T]:
    """The items of shard ``spec`` (all of them without one), in their original order."""
    if spec is None:
        return list(items)
    shards = assign(case_ids, spec.count, durations)
    return [item for item, shard in zip(items, shards) if shard == spec.index - 1]


def load_durations(path: str | None) -> dict[str, float] | None:
    """A ``durations.json`` (``--durations``), or None; a UsageError names what is wrong."""
    if not path:
        return None
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"--durations {path!r}: cannot read it ({exc.strerror or exc}); pass "
                         f"the {DURATIONS_FILE} a previous run wrote in its report dir") from None
    except ValueError as exc:
        raise UsageError(f"--durations {path!r}: not JSON ({exc}); pass the {DURATIONS_FILE} "
                         "a previous run wrote in its report dir") from None
    cases = data.get("cases") if isinstance(data, dict) else None
    if not isinstance(cases, dict) or not all(
            isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool)
            and v >= 0 for k, v in cases.items()):
        raise UsageError(f"--durations {path!r}: expected {{\"cases\": {{case id: seconds >= 0}}}} "
                         f"as in the {DURATIONS_FILE} a run writes")
    return {k: float(v) for k, v in cases.items()}


def durations_bytes(durations: Mapping[str, float]) -> bytes:
    """``durations.json`` content: case id → seconds, keys sorted."""
    data = {"cases": {k: round(float(v), 6) for k, v in sorted(durations.items())}}
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")


def shard_bytes(kind: str, spec: ShardSpec, all_ids: Sequence[str], selected: Sequence[str],
                extra: Mapping[str, Any] | None = None) -> bytes:
    """``shard.json`` content for one shard of a ``kind`` command ("run", "sweep", ...)."""
    data: dict[str, Any] = {
        "format": SHARD_FORMAT, "kind": kind, "shard": {"index": spec.index, "count": spec.count},
        "cases": list(all_ids), "selected": list(selected),
    }
    data.update(extra or {})
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")


def read_shard(directory: str | os.PathLike[str]) -> dict[str, Any]:
    """A shard dir's ``shard.json``; a UsageError says what is missing or wrong."""
    path = Path(directory) / SHARD_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{os.fspath(directory)!r} holds no readable {SHARD_FILE} "
                         f"({exc.strerror or exc}); pass the report dirs of runs made with "
                         "--shard I/N") from None
    except ValueError as exc:
        raise UsageError(f"{os.fspath(path)!r} is not JSON ({exc}); rerun that shard") from None
    if not isinstance(data, dict) or data.get("format") != SHARD_FORMAT:
        raise UsageError(f"{os.fspath(path)!r} is not a {SHARD_FORMAT} file; rerun that shard "
                         "with this harness version")
    return data
