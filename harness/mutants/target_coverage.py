"""Which mutant targets each scenario's reference run calls: exact scenario selection.

A mutant replaces only the functions and methods its edits lie in (its *targets*, found by
:func:`harness.mutants.source_patch.targets`), and the reference is deterministic per
(scenario, seed). A scenario whose reference run calls none of a mutant's targets therefore
runs identically under that mutant (its execution never reaches a replaced object) and
cannot kill it: skipping it changes no verdict of the kill matrix. This is the classic
mutation-testing optimisation (run only the tests that cover the mutated code), exact here
because coverage is recorded at the same places the mutants patch.

Guarantees:

* :func:`tracking` gives a mutant's target names, or says why its scenarios cannot be
  selected (then all are kept): it edits a top-level assignment (a constant read at import
  or call time, which no call wrapper sees), its patches are not text edits, it declares
  its own features (the harness then drives it differently wherever its code runs), its
  edits do not apply, or a target is neither a function nor a plain, static or class
  method nor a property;
* :func:`recording` wraps exactly the places :func:`~harness.mutants.source_patch.edits`
  patches: each target on its module or class, and each sibling module of the package that
  imported a target function by name (the same :func:`~harness.mutants.source_patch.importers`
  search). A wrapper adds its target's name to a process-wide set and calls the original
  with the same arguments, returning or raising what it does; nothing else changes (the
  reference's digests and verdicts under recording equal a plain run's, tested). On exit
  every wrapper is gone, also from a module imported while recording ran;
* :func:`covering_runner` is a runner that, per scenario, clears that set before the run
  and writes the names called during it to a file of ``folder`` afterwards: the side
  channel that brings coverage back from the suite's forked workers without a field in
  every report (the ``--jobs 1`` and ``--jobs N`` readings are the same). It writes only
  when the implementation opened a runtime in this very process (:data:`OPENED`: the
  code the wrappers watch ran here). A scenario with no readable file (skipped, never
  opened here, its worker died, or the runner moved it to a fresh process of its own)
  reads as *unknown*, and unknown keeps it for every mutant;
* :func:`read_coverage` is every recorded scenario's set of called target names.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import sys
import types
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping

from harness.mutants.mutant import Mutant
from harness.mutants.source_patch import MutantError, Target, edits_of, importers, targets

_CALLED: set[str] = set()
"""Names of the targets called in this process since the last clear (one scenario)."""


@dataclass(frozen=True, slots=True)
class Tracking:
    """How a mutant's scenarios are selected."""

    targets: tuple[Target, ...] = ()
    """What it replaces; a scenario is kept when its reference run called one of them."""
    untracked: str = ""
    """Why every scenario is kept instead ("" when ``targets`` select)."""

    @property
    def names(self) -> frozenset[str]:
        return frozenset(t.name for t in self.targets)


def tracking(mutant: Mutant) -> Tracking:
    """What selects ``mutant``'s scenarios (see the module doc)."""
    if mutant.features is not None:
        return Tracking(untracked="it declares its own features")
    items = edits_of(mutant.patches)
    if items is None:
        return Tracking(untracked="its patches are not text edits")
    try:
        found = targets(*items)
    except MutantError as exc:
        return Tracking(untracked=f"its edits do not apply ({exc})")
    for target in found:
        if target.assignment:
            return Tracking(untracked=f"it edits the top-level assignment {target.name}, "
                                      "read without a call")
        if _recorder(_current(target), target.name) is None:
            return Tracking(untracked=f"its target {target.name} is not a function, method "
                                      "or property")
    return Tracking(found)


def _current(target: Target) -> Any:
    module = sys.modules.get(target.module)
    if module is None:
        return None
    if len(target.path) == 1:
        return vars(module).get(target.path[0])
    owner = vars(module).get(target.path[0])
    return vars(owner).get(target.path[1]) if isinstance(owner, type) else None


def _wrapped(original: Callable[..., Any], name: str) -> Callable[..., Any]:
    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        _CALLED.add(name)
        return original(*args, **kwargs)

    return call


def _recorder(value: Any, name: str) -> Any:
    """``value`` (as found on its module or in its class body) with each call recorded
    under ``name``, bound the same way; None when it is no kind known to bind the same."""
    if isinstance(value, types.FunctionType):
        return _wrapped(value, name)
    if isinstance(value, (staticmethod, classmethod)):
        return type(value)(_wrapped(value.__func__, name))
    if isinstance(value, property):
        parts = [None if f is None else _wrapped(f, name)
                 for f in (value.fget, value.fset, value.fdel)]
        return property(*parts, value.__doc__)
    return None


OPENED = "<opened here>"
"""Recorded when the implementation given to :func:`recording` opens a runtime in this
process: only then does a scenario's reading say anything (see :func:`covering_runner`)."""


@contextlib.contextmanager
def recording(chosen: Iterable[Target], implementation: Any = None) -> Iterator[None]:
    """Every call of a ``chosen`` target is recorded while inside (see the module doc), and
    :data:`OPENED` when ``implementation`` opens a runtime."""
    sites: list[tuple[Any, str, Any]] = []
    if implementation is not None:
        owner = next((k for k in type(implementation).__mro__ if "open" in vars(k)), None)
        probe = None if owner is None else _recorder(vars(owner)["open"], OPENED)
        if probe is not None:
            sites.append((owner, "open", probe))
    for target in sorted(set(chosen), key=lambda t: t.name):
        module = sys.modules[target.module]
        wrapper = _recorder(_current(target), target.name)
        if wrapper is None:
            continue  # tracking() kept every scenario for its mutants already
        owner = module if len(target.path) == 1 else vars(module)[target.path[0]]
        own = [(owner, target.path[-1], wrapper)]
        sites += own + (importers(module, own) if owner is module else [])
    originals = {id(wrapper): vars(owner)[attribute] for owner, attribute, wrapper in sites}
    with contextlib.ExitStack() as stack:
        for owner, attribute, wrapper in sites:
            stack.enter_context(_swapped(owner, attribute, wrapper))
        try:
            yield
        finally:
            _restore_late_importers(sites, originals)


@contextlib.contextmanager
def _swapped(owner: Any, attribute: str, value: Any) -> Iterator[None]:
    original = vars(owner)[attribute]
    setattr(owner, attribute, value)
    try:
        yield
    finally:
        setattr(owner, attribute, original)


def _restore_late_importers(sites: list[tuple[Any, str, Any]], originals: Mapping[int, Any]
                            ) -> None:
    """A module imported while recording that imported a target by name holds the wrapper:
    give it the original back (a mutant later looks for the original there)."""
    packages = {owner.__name__.split(".")[0] if isinstance(owner, types.ModuleType)
                else owner.__module__.split(".")[0] for owner, _, _ in sites}
    for name, module in list(sys.modules.items()):
        if module is None or name.split(".")[0] not in packages:
            continue
        for attribute, value in list(vars(module).items()):
            if id(value) in originals and not any(
                    owner is module and attribute == site for owner, site, _ in sites):
                setattr(module, attribute, originals[id(value)])


def covering_runner(runner: Callable[..., Any], folder: str) -> Callable[..., Any]:
    """``runner`` that also writes, per scenario, the targets its run called (see the
    module doc)."""
    from harness.running.driving.hung_threads import still_running

    def run(implementation: Any, scenario: Any, seed: int, **options: Any) -> Any:
        # A tainted implementation's scenario runs in a fresh process of its own, whose
        # calls this process never sees: it stays unknown.
        known = not still_running(implementation)
        _CALLED.clear()
        outcome = runner(implementation, scenario, seed, **options)
        if known and OPENED in _CALLED:
            _write(folder, str(scenario.id), sorted(_CALLED - {OPENED}))
        return outcome

    return run


def _file(folder: str, scenario_id: str) -> str:
    digest = hashlib.sha256(scenario_id.encode("utf-8")).hexdigest()[:32]
    return os.path.join(folder, f"{digest}.json")


def _write(folder: str, scenario_id: str, called: list[str]) -> None:
    path = _file(folder, scenario_id)
    partial = f"{path}.{os.getpid()}.part"
    with open(partial, "w", encoding="utf-8") as out:
        json.dump({"scenario": scenario_id, "called": called}, out)
    os.replace(partial, path)  # a reader never sees half a file


def read_coverage(folder: str) -> dict[str, frozenset[str]]:
    """scenario id → names of the targets its reference run called (recorded ones only)."""
    found: dict[str, frozenset[str]] = {}
    for entry in sorted(os.listdir(folder)):
        if not entry.endswith(".json"):
            continue
        try:
            with open(os.path.join(folder, entry), encoding="utf-8") as source:
                data = json.load(source)
            found[str(data["scenario"])] = frozenset(str(n) for n in data["called"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # unreadable: that scenario stays unknown, so it is kept
    return found
