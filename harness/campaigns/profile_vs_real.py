"""A profile beside the real CLI it models: per criterion and per scenario, from two reports.

A profile (``profile:NAME``, or ``profile:NAME@cli``: the same profile run on its CLI's
applicable scenarios and judged from outside as the CLI is) models a system whose real CLI
the harness can also run (``cli:NAME``). :func:`side_by_side` reads the two ``report.json``
documents and puts them side by side on what both can say:

Guarantees:

* **the real CLI's scenarios**: only scenarios both reports ran (by id, variants included)
  are compared; the real report's scenarios the profile's lacks and the profile's scenarios
  outside the real CLI's set are counted and named, never compared;
* **the real CLI's criteria**: a criterion the real report gives as n/a (a black box cannot
  see it) stays n/a on both sides, with the real report's reason; the others are recomputed
  on each side from the per-scenario verdicts over the common scenarios only (a criterion
  fails on a side when a common scenario's verdict fails or errs there, passes when one
  passes and none fails, else is not exercised, or n/a when every verdict is);
* **agreement**: a criterion agrees when its per-scenario verdicts are the same on both sides
  in every common scenario; each scenario row lists the criteria whose verdict differs, with
  the real report's replay command;
* pure: a function of the two documents; rows in the real report's criterion order and its
  scenario order, so the same reports always give the same tables. pandas comes from the
  ``matrix`` extra (:func:`harness.campaigns.compare.require_pandas`).

:func:`pairs` finds, among the reports given to ``compare``, each profile report and each real
report of the CLI that profile models (``Profile.cli``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from harness.campaigns.compare import require_pandas
from harness.contract.errors import UsageError

if TYPE_CHECKING:  # pragma: no cover
    import pandas

PROFILE_PREFIX = "profile:"
CLI_PREFIX = "cli:"
OUTSIDE_SUFFIX = "@cli"
_SHORT = {"pass": "pass", "fail": "FAIL", "error": "ERROR", "not_exercised": "not exercised",
          "not_applicable": "n/a"}
FAILING = frozenset({"fail", "error"})


@dataclass(frozen=True, slots=True)
class Side:
    """One report as the side by side reads it."""

    label: str
    implementation: str
    version: str
    criteria: tuple[tuple[str, str, str, str], ...]
    """(id, title, criterion-level status, its reason) in the report's order."""
    scenarios: tuple[tuple[str, str, str, dict[str, tuple[str, str]]], ...]
    """(id, status, replay, criterion id -> (verdict status, first evidence note))."""


@dataclass(frozen=True, slots=True)
class SideBySide:
    profile: str
    real: str
    criteria: "pandas.DataFrame"
    """criterion, title, profile, real, agree, differ (scenarios whose verdicts differ),
    opposed (of those, passed on one side and failed on the other), reason (n/a)."""
    scenarios: "pandas.DataFrame"
    """scenario, profile, real, differences ("L4.3 pass / FAIL; …"), replay (the real's)."""
    common: int
    only_real: tuple[str, ...]
    """Scenarios the real report ran that the profile's did not."""
    outside_real: int
    """Scenarios the profile's report ran that the real one did not (left out)."""


def _name(data: dict[str, Any]) -> str:
    implementation = data.get("implementation")
    return str(implementation.get("name", "")) if isinstance(implementation, dict) else ""


def read_side(data: Any, source: str, label: str = "") -> Side:
    """The criteria and per-scenario verdicts of a report.json; UsageError names what is
    missing (a report without scenarios cannot be compared scenario by scenario)."""
    def bad(where: str) -> UsageError:
        return UsageError(f"{source}: {where}; pass a report.json written by "
                          "`lifecycle-harness run` (its scenarios and their verdicts)")

    if not isinstance(data, dict) or not _name(data):
        raise bad("implementation.name is missing")
    criteria = data.get("criteria")
    scenarios = data.get("scenarios")
    if not isinstance(criteria, list) or not criteria:
        raise bad("criteria is missing or empty")
    if not isinstance(scenarios, list) or not scenarios:
        raise bad("scenarios is missing or empty")
    kept_criteria = []
    for position, c in enumerate(criteria):
        if not isinstance(c, dict) or not isinstance(c.get("id"), str) \
                or not isinstance(c.get("status"), str):
            raise bad(f"criteria[{position}] lacks a string id or status")
        kept_criteria.append((c["id"], str(c.get("title", "")), c["status"],
                              str(c.get("expectation_reason", "") or "")))
    kept_scenarios = []
    for position, s in enumerate(scenarios):
        if not isinstance(s, dict) or not isinstance(s.get("id"), str) \
                or not isinstance(s.get("verdicts"), list):
            raise bad(f"scenarios[{position}] lacks a string id or a verdicts list")
        verdicts: dict[str, tuple[str, str]] = {}
        for v in s["verdicts"]:
            if not isinstance(v, dict) or not isinstance(v.get("criterion_id"), str) \
                    or not isinstance(v.get("status"), str):
                raise bad(f"scenarios[{position}] ({s['id']}) has a verdict without a string "
                          "criterion_id or status")
            evidence = v.get("evidence") or []
            note = next((str(e.get("note", "")) for e in evidence
                         if isinstance(e, dict) and e.get("note")), "")
            verdicts[v["criterion_id"]] = (v["status"], note)
        kept_scenarios.append((s["id"], str(s.get("status", "")), str(s.get("replay", "")),
                               verdicts))
    version = str((data.get("implementation") or {}).get("version", ""))
    return Side(label or _name(data), _name(data), version, tuple(kept_criteria),
                tuple(kept_scenarios))


def profile_cli(implementation: str) -> str:
    """The CLI a ``profile:NAME[@cli]`` report's profile models ('' for anything else)."""
    if not implementation.startswith(PROFILE_PREFIX):
        return ""
    from harness.profiles import PROFILES

    name = implementation.removeprefix(PROFILE_PREFIX).removesuffix(OUTSIDE_SUFFIX)
    return next((p.cli for p in PROFILES if p.name == name), "")


def pairs(reports: Sequence[tuple[Any, str, str]]) -> list[tuple[int, int]]:
    """(profile position, real position) for each profile report and each real report of
    the CLI its profile models, in the order given; ``reports``: (data, source, label)."""
    names = [_name(data) if isinstance(data, dict) else "" for data, _, _ in reports]
    found = []
    for i, name in enumerate(names):
        cli = profile_cli(name)
        if cli:
            found += [(i, j) for j, other in enumerate(names) if other == CLI_PREFIX + cli]
    return found


def _aggregate(statuses: Sequence[str]) -> tuple[str, int]:
    """(status of a criterion over these verdicts, scenarios exercising it)."""
    exercised = sum(1 for s in statuses if s in FAILING or s == "pass")
    failing = sum(1 for s in statuses if s in FAILING)
    if failing:
        return ("error" if all(s == "error" for s in statuses if s in FAILING) else "fail",
                exercised)
    if exercised:
        return "pass", exercised
    if statuses and all(s == "not_applicable" for s in statuses):
        return "not_applicable", 0
    return "not_exercised", 0


def _cell(status: str, failing: int, exercised: int) -> str:
    text = _SHORT.get(status, status)
    if status in FAILING:
        return f"{text} ×{failing} ({exercised})"
    if status == "pass":
        return f"{text} ({exercised})"
    return text


def _real_reason(real: Side, criterion: str, level_reason: str) -> str:
    if level_reason:
        return level_reason
    return next((verdicts[criterion][1] for _, _, _, verdicts in real.scenarios
                 if criterion in verdicts and verdicts[criterion][1]), "")


def side_by_side(profile: Side, real: Side) -> SideBySide:
    pandas = require_pandas()
    by_id = {s[0]: s for s in profile.scenarios}
    common = [s for s in real.scenarios if s[0] in by_id]
    if not common:
        raise UsageError(f"{profile.label} and {real.label} ran no scenario in common; run "
                         f"the profile on the real CLI's scenarios (--impl "
                         f"{profile.implementation.removesuffix(OUTSIDE_SUFFIX)}{OUTSIDE_SUFFIX})")
    only_real = tuple(s[0] for s in real.scenarios if s[0] not in by_id)
    real_ids = {s[0] for s in real.scenarios}
    outside_real = sum(1 for s in profile.scenarios if s[0] not in real_ids)
    profile_level = {c[0]: c for c in profile.criteria}

    judged: list[str] = []
    criterion_rows = []
    for cid, title, real_status, real_reason in real.criteria:
        real_verdicts = [verdicts.get(cid, ("not_exercised", ""))[0]
                         for _, _, _, verdicts in common]
        if real_status == "not_applicable" or (
                real_verdicts and all(s == "not_applicable" for s in real_verdicts)):
            criterion_rows.append({
                "criterion": cid, "title": title, "profile": "n/a", "real": "n/a",
                "agree": True, "differ": 0, "opposed": 0,
                "reason": _real_reason(real, cid, real_reason)})
            continue
        judged.append(cid)
        profile_verdicts = [by_id[s[0]][3].get(cid, ("not_exercised", ""))[0] for s in common]
        cells = []
        for statuses in (profile_verdicts, real_verdicts):
            status, exercised = _aggregate(statuses)
            cells.append(_cell(status, sum(1 for s in statuses if s in FAILING), exercised))
        reason = ""
        level = profile_level.get(cid)
        if level is not None and level[2] == "not_applicable":
            cells[0], reason = "n/a", f"{profile.label}: {level[3]}"
        differ = sum(1 for p, r in zip(profile_verdicts, real_verdicts) if p != r)
        opposed = sum(1 for p, r in zip(profile_verdicts, real_verdicts)
                      if {p in FAILING, r in FAILING} == {True, False} and "pass" in (p, r))
        criterion_rows.append({"criterion": cid, "title": title, "profile": cells[0],
                               "real": cells[1], "agree": differ == 0 and cells[0] != "n/a",
                               "differ": differ, "opposed": opposed, "reason": reason})
    criteria = pandas.DataFrame(criterion_rows, columns=[
        "criterion", "title", "profile", "real", "agree", "differ", "opposed", "reason"])

    scenario_rows = []
    for sid, real_status, replay, real_verdicts in common:
        profile_verdicts = by_id[sid][3]
        differences = []
        for cid in judged:
            p = profile_verdicts.get(cid, ("not_exercised", ""))[0]
            r = real_verdicts.get(cid, ("not_exercised", ""))[0]
            if p != r:
                differences.append(f"{cid} {_SHORT.get(p, p)} / {_SHORT.get(r, r)}")
        scenario_rows.append({
            "scenario": sid,
            "profile": _scenario_status(by_id[sid][1], profile_verdicts, judged),
            "real": _scenario_status(real_status, real_verdicts, judged),
            "differences": "; ".join(differences), "replay": replay})
    scenarios = pandas.DataFrame(scenario_rows, columns=[
        "scenario", "profile", "real", "differences", "replay"])
    return SideBySide(profile.label, real.label, criteria, scenarios, len(common), only_real,
                      outside_real)


def _scenario_status(status: str, verdicts: dict[str, tuple[str, str]],
                     judged: Sequence[str]) -> str:
    """failed / passed on the criteria the real CLI is judged on (a full-judged profile
    scenario failing only on a criterion the real one cannot show is passed here); error
    when the scenario did not complete."""
    if status == "error":
        return "error"
    failing = [cid for cid in judged if verdicts.get(cid, ("", ""))[0] in FAILING]
    return "failed" if failing else "passed"


# --------------------------------------------------------------------------- renderings


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(view: SideBySide) -> list[str]:
    lines = [f"### Profile beside the real CLI: {view.profile} beside {view.real}", ""]
    scope = (f"{view.common} scenarios both ran (the real CLI's applicable set); criteria the "
             "real CLI is n/a on stay n/a.")
    if view.only_real:
        scope += (f" {len(view.only_real)} scenario(s) only in {view.real}'s report, not "
                  f"compared: {', '.join(view.only_real)}.")
    if view.outside_real:
        scope += (f" {view.outside_real} scenario(s) of {view.profile}'s report are not in "
                  f"{view.real}'s (outside its applicable set, or not run there), left out.")
    lines += [_escape(scope), ""]
    lines += [f"| criterion | {view.profile} | {view.real} | scenarios that differ "
              "(pass on one side, fail on the other) |", "|---|---|---|---|"]
    reasons = []
    for row in view.criteria.itertuples(index=False):
        if row.profile == "n/a" and row.real == "n/a":
            reasons.append(row.criterion)
            continue
        differ = f"{row.differ} ({row.opposed})" if row.differ else "none"
        lines.append(f"| {row.criterion} | {_escape(row.profile)} | {_escape(row.real)} | "
                     f"{differ} |")
        if row.reason:
            lines.append(f"| | {_escape(row.reason)} | | |")
    if reasons:
        first = view.criteria[view.criteria["criterion"] == reasons[0]]["reason"].iloc[0]
        shared = first.removeprefix(f"{reasons[0]} ")
        lines += ["", _escape(f"n/a on both sides ({len(reasons)}): {', '.join(reasons)}; the "
                              f"real report's reason: {shared}")]
    differing = view.scenarios[view.scenarios["differences"] != ""]
    lines += ["", f"Scenarios whose verdicts differ: {len(differing)} of {view.common}.", ""]
    if len(differing):
        lines += [f"| scenario | {view.profile} | {view.real} | criterion: profile / real |"
                  " replay (real) |", "|---|---|---|---|---|"]
        for row in differing.itertuples(index=False):
            lines.append(f"| {row.scenario} | {row.profile} | {row.real} | "
                         f"{_escape(row.differences)} | `{_escape(row.replay)}` |")
    return lines


def to_html(view: SideBySide) -> str:
    import html

    differing = view.scenarios[view.scenarios["differences"] != ""]
    return "\n".join([
        f"<h2>Profile beside the real CLI: {html.escape(view.profile)} beside "
        f"{html.escape(view.real)}</h2>",
        f"<p>{view.common} scenarios both ran; criteria the real CLI is n/a on stay n/a.</p>",
        view.criteria.to_html(escape=True, index=False),
        f"<p>Scenarios whose verdicts differ: {len(differing)} of {view.common}.</p>",
        differing.to_html(escape=True, index=False),
    ])
