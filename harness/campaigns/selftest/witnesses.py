"""Witnesses: per mutant, the scenarios an earlier self-test caught it on, tried first.

A self-test stops a mutant once its expected criteria have failed, so the order of its
scenarios decides how many it runs. The order its stages give (the expected criteria's own
stage first, then every scenario exercising them, then the whole suite) finds most defects
at once, but a few mutants edit code nearly every scenario calls and are caught only by a
scenario far down that order: seven of them made up 517 of a self-test's 870 mutant runs.
A witness table, ``{mutant name: [scenario id, ...]}``, remembers what caught each mutant;
``selftest --write-witnesses FILE`` writes it from a run, and the table committed beside
this module (``witnesses.json``) is the default, like a test runner's record of what failed
last, but versioned with the mutants, so every run of the same tree orders alike.

Guarantees (with :func:`harness.campaigns.selftest.killmatrix.run_selftest`):

* a witness only orders what runs. Whether a mutant is caught never depends on the table
  (every set of its stages runs as without it until one catches; a witness already run is
  not run again, and its failures count for the stage set it belongs to); the expected
  criteria credited with catching it are never fewer than without the table, and all of
  them when the witnesses alone fail every one (it stops there);
* a witness is run only where the mutant would run it anyway: a scenario of the suite given
  that its coverage selection keeps; names of mutants or scenarios that are not there are
  ignored (a stale or foreign table costs time, never a verdict);
* a table file that cannot be read is a :class:`WitnessError` naming the file, what is
  wrong and the fix.
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping, Sequence

from harness.report.result import MutantResult

PACKAGED_WITNESSES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "witnesses.json")
"""The table committed with the bundled mutants (rewritten with ``--write-witnesses``)."""

Witnesses = Mapping[str, tuple[str, ...]]


class WitnessError(Exception):
    """A witness table file is unreadable or not a table of scenario ids per mutant."""


def load(path: str) -> dict[str, tuple[str, ...]]:
    """The table in ``path``: ``{mutant name: [scenario id, ...]}`` as JSON."""
    try:
        with open(path, encoding="utf-8") as handle:
            data: Any = json.load(handle)
    except OSError as exc:
        raise WitnessError(f"witness table {path}: cannot read it ({exc.strerror or exc}); "
                           "pass an existing file or write one with --write-witnesses") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise WitnessError(f"witness table {path}: not JSON ({exc}); rewrite it with "
                           "`lifecycle-harness selftest --write-witnesses FILE`") from exc
    if not isinstance(data, dict):
        raise WitnessError(f"witness table {path}: the top level is a {type(data).__name__}, "
                           "expected an object of mutant name -> list of scenario ids")
    table: dict[str, tuple[str, ...]] = {}
    for name, ids in data.items():
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise WitnessError(f"witness table {path}: the entry of mutant {name!r} is not a "
                               "list of scenario ids (strings)")
        table[name] = tuple(ids)
    return table


def table_of(mutants: Sequence[MutantResult]) -> dict[str, tuple[str, ...]]:
    """The witnesses a self-test's results give: per caught mutant, the scenarios it was
    caught on (:attr:`MutantResult.caught_on`)."""
    return {m.name: m.caught_on for m in mutants if m.caught and m.caught_on}


def write(path: str, found: Witnesses, previous: Witnesses | None = None) -> None:
    """Write ``previous`` updated with ``found`` (the mutants not run keep their entries),
    sorted by mutant name so that a rewrite shows as a small diff."""
    table = {**(previous or {}), **found}
    text = json.dumps({name: list(table[name]) for name in sorted(table)}, indent=1)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text + "\n")


def first(witnessed: Sequence[str], scenarios: Sequence[Any]) -> tuple[Any, ...]:
    """The scenarios named in ``witnessed`` among ``scenarios`` (the ones the mutant may run),
    in the witness order; the rest are ignored."""
    by_id = {s.id: s for s in scenarios}
    return tuple(by_id[i] for i in dict.fromkeys(witnessed) if i in by_id)
