"""The ``--last-failed`` cache: which scenarios and criteria failed in the previous run.

``run`` records, after every run, ``.lifecycle-harness/running/lastfailed.json`` in the working
directory (like pytest's cache, one per project checkout)::

    {"version": 1, "scenarios": ["l4-crash-after-result-saved"], "criteria": ["L4.1"]}

Guarantees: :func:`updated` merges like pytest's ``--lf``: a scenario that ran and passed
leaves the record, one that failed (:func:`harness.running.selection.scenario_failed`) enters it,
one that did not run keeps its previous state; likewise a criterion that was judged leaves
or enters, one not selected keeps its state. :func:`load` gives an empty record for a
missing file and raises :class:`~harness.contract.errors.UsageError` naming the file and the fix
for an unreadable one; :func:`save` writes atomically and reports (never raises) an
unwritable directory, since a run's verdict must not depend on the cache.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from harness.contract.errors import UsageError
from harness.report.result import CriterionStatus, RunResult, ScenarioStatus
from harness.running.selection import scenario_failed

CACHE_PATH = Path(".lifecycle-harness") / "lastfailed.json"
CACHE_VERSION = 1


@dataclass(frozen=True, slots=True)
class LastFailed:
    scenarios: tuple[str, ...] = ()
    """Ids of the scenarios that failed or errored."""
    criteria: tuple[str, ...] = ()
    """Ids of the criteria that failed or errored."""


def load(path: str | os.PathLike[str] = CACHE_PATH) -> LastFailed:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return LastFailed()
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: cannot read the --last-failed cache ({exc}); delete the "
                         "file (the next run writes it again)") from None
    if (not isinstance(data, dict) or data.get("version") != CACHE_VERSION
            or not all(isinstance(data.get(k), list) and all(isinstance(i, str) for i in data[k])
                       for k in ("scenarios", "criteria"))):
        raise UsageError(f"{path}: not a version-{CACHE_VERSION} --last-failed cache; delete "
                         "the file (the next run writes it again)")
    return LastFailed(tuple(data["scenarios"]), tuple(data["criteria"]))


def load_quietly(path: str | os.PathLike[str] = CACHE_PATH) -> LastFailed:
    """The record, or an empty one when it cannot be read (it is about to be rewritten)."""
    try:
        return load(path)
    except UsageError:
        return LastFailed()


def updated(previous: LastFailed, result: RunResult,
            expected: Mapping[str, str] | None = None) -> LastFailed:
    judged = {c.id for c in result.criteria if c.status is not CriterionStatus.NOT_SELECTED}
    ran = {s.id for s in result.scenarios
           if s.status not in (ScenarioStatus.NOT_RUN, ScenarioStatus.SKIPPED)}
    failed_now = [s.id for s in result.scenarios if scenario_failed(s, judged, expected)]
    scenarios = [s for s in previous.scenarios if s not in ran] + failed_now
    bad_now = [c.id for c in result.criteria
               if c.status in (CriterionStatus.FAILED, CriterionStatus.ERROR)]
    criteria = [c for c in previous.criteria if c not in judged] + bad_now
    return LastFailed(tuple(dict.fromkeys(scenarios)), tuple(dict.fromkeys(criteria)))


def save(record: LastFailed, path: str | os.PathLike[str] = CACHE_PATH) -> str | None:
    """Write the record; returns why it could not be written (None when written)."""
    from harness.report.atomic import write_text

    path = Path(path)
    text = json.dumps({"version": CACHE_VERSION, "scenarios": list(record.scenarios),
                       "criteria": list(record.criteria)}, indent=2) + "\n"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, text)
    except OSError as exc:
        return f"cannot write the --last-failed cache {path}: {exc.strerror or exc}"
    return None
