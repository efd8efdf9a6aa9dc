"""Mutate reference code by exact text edits, the way mutation-testing tools do.

A mutant is best read as a diff: ``edit("reference_impl.failure_policy", find=..., replace=...)``
says exactly what the defect is. Guarantees of :func:`edits`:

* every ``find`` must occur exactly once in the module's current source, otherwise
  :class:`MutantError` is raised when the mutant is applied — a refactor of the reference
  breaks the mutant loudly instead of leaving it silently inert;
* only the functions, methods and top-level assignments whose source contains an edit are
  replaced (patched on the original module or class, and in sibling modules of the same
  package that imported the function by name; undone on exit); every other object —
  classes, enums, constants — keeps its identity, so mutated code interoperates with the
  rest of the process;
* the mutated source is compiled under a ``<mutant …>`` file name so tracebacks say so.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import inspect
import sys
import types
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Iterator
from unittest import mock


class MutantError(Exception):
    """Root of self-test errors: a mutant cannot be applied as written."""


@dataclass(frozen=True, slots=True)
class Edit:
    module: str
    find: str
    replace: str


def edit(module: str, find: str, replace: str) -> Edit:
    return Edit(module, find, replace)


@dataclass(frozen=True, slots=True)
class Target:
    """What one edit replaces: a top-level function, a method, or a top-level assignment."""

    module: str
    path: tuple[str, ...]
    """("func",), ("Class", "method") or ("CONST",)."""
    assignment: bool = False
    """A top-level assignment (its value is read at import or at call time, so no call
    wrapper can tell which runs use it)."""

    @property
    def name(self) -> str:
        return f"{self.module}:{'.'.join(self.path)}"


def _targets(tree: ast.Module, offsets: list[tuple[int, int]], source: str
             ) -> list[tuple[tuple[str, ...], bool]]:
    """Paths (("func",) or ("Class", "method") or ("CONST",)) of the nodes holding an edit,
    each with whether it is a top-level assignment."""
    line_starts = [0]
    for line in source.splitlines(keepends=True):
        line_starts.append(line_starts[-1] + len(line))

    def line_of(offset: int) -> int:
        low, high = 0, len(line_starts) - 1
        while low < high:
            middle = (low + high + 1) // 2
            if line_starts[middle] <= offset:
                low = middle
            else:
                high = middle - 1
        return low + 1

    spans = [(line_of(start), line_of(max(start, end - 1))) for start, end in offsets]
    found: list[tuple[tuple[str, ...], bool]] = []

    def covers(node: ast.AST) -> bool:
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        return any(first <= a and b <= node.end_lineno for a, b in spans)  # type: ignore[operator]

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and covers(node):
            found.append(((node.name,), False))
        elif isinstance(node, ast.ClassDef) and covers(node):
            methods = [
                ((node.name, item.name), False)
                for item in node.body
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and covers(item)
            ]
            if not methods:
                raise MutantError(f"an edit inside class {node.name} must lie within a method")
            found.extend(methods)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and covers(node):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found.extend(((t.id,), True) for t in targets if isinstance(t, ast.Name))
    if len(found) < 1:
        raise MutantError("an edit must lie inside a function, a method or a top-level assignment")
    return found


@functools.lru_cache(maxsize=64)
def _parsed(source: str) -> ast.Module:
    """A module source's syntax tree: every mutant of a module locates its edits in the same
    one (never mutated: only read)."""
    return ast.parse(source)


def _located(module_name: str, module_edits: list[Edit]
             ) -> tuple[types.ModuleType, str, list[tuple[tuple[str, ...], bool]]]:
    """The module, its mutated source, and the targets the edits lie in (MutantError when
    an edit does not apply)."""
    module = importlib.import_module(module_name)
    source = inspect.getsource(module)
    offsets = []
    mutated = source
    for item in module_edits:
        occurrences = source.count(item.find)
        if occurrences != 1:
            raise MutantError(
                f"mutant edit for {module_name}: the text to find occurs {occurrences} times "
                f"(must be exactly once); update the mutant to the current source: {item.find!r}"
            )
        start = source.index(item.find)
        offsets.append((start, start + len(item.find)))
        if mutated.count(item.find) != 1:
            raise MutantError(f"mutant edits for {module_name} overlap: {item.find!r}")
        mutated = mutated.replace(item.find, item.replace)
    return module, mutated, _targets(_parsed(source), offsets, source)


def targets(*items: Edit) -> tuple[Target, ...]:
    """What the edits replace, in edit order per module (MutantError when one does not
    apply): the same finding :func:`edits` patches by."""
    found: list[Target] = []
    for module_name, module_edits in _by_module(items).items():
        _, _, located = _located(module_name, module_edits)
        found += [Target(module_name, path, assignment) for path, assignment in located]
    return tuple(found)


def _by_module(items: tuple[Edit, ...]) -> dict[str, list[Edit]]:
    by_module: dict[str, list[Edit]] = {}
    for item in items:
        by_module.setdefault(item.module, []).append(item)
    return by_module


def _replacements(module_name: str, module_edits: list[Edit]) -> list[tuple[Any, str, Any]]:
    module, mutated, located = _located(module_name, module_edits)
    paths = [path for path, _ in located]
    namespace: dict[str, Any] = {
        "__name__": module.__name__,
        "__file__": module.__file__,
        "__package__": module.__package__,
        "__builtins__": __builtins__,
    }
    exec(compile(mutated, f"<mutant of {module.__file__}>", "exec"), namespace)
    replaced_functions = {path[0] for path in paths if len(path) == 1}
    replacements: list[tuple[Any, str, Any]] = []
    for path in paths:
        if len(path) == 1:
            replacements.append((module, path[0], namespace[path[0]]))
        else:
            owner = getattr(module, path[0])
            replacements.append((owner, path[1], vars(namespace[path[0]])[path[1]]))
    # Mutated functions must see the original classes, enums and helpers (not re-created
    # copies), except the names this mutant replaces.
    for name, value in vars(module).items():
        if name not in replaced_functions:
            namespace[name] = value
    return replacements + importers(module, replacements)


def importers(module: types.ModuleType, replacements: list[tuple[Any, str, Any]]) -> list[tuple[Any, str, Any]]:
    """The same swaps in sibling modules that imported a replaced function by name.

    ``from reference_impl.permissions import rule_layer_decision`` binds the original in the
    importer; the edit made in the source file would reach it, so the mutant must too."""
    package = module.__name__.split(".")[0]
    originals = {
        id(getattr(owner, name)): new
        for owner, name, new in replacements
        if owner is module and callable(getattr(owner, name, None))
    }
    found = []
    for name, other in sorted(sys.modules.items()):
        if other is None or other is module or not (name == package or name.startswith(package + ".")):
            continue
        for attribute, value in vars(other).items():
            if id(value) in originals:
                found.append((other, attribute, originals[id(value)]))
    return found


def edits(*items: Edit) -> Callable[[], ContextManager[Any]]:
    """A ``patches`` factory applying text edits to reference modules."""

    compiled: list[tuple[Any, str, Any]] = []  # built once: runtimes enter this per call

    @contextlib.contextmanager
    def apply() -> Iterator[None]:
        if not compiled:
            for module_name, module_edits in _by_module(items).items():
                compiled.extend(_replacements(module_name, module_edits))
        with contextlib.ExitStack() as stack:
            for owner, attribute, value in compiled:
                assert isinstance(owner, (types.ModuleType, type)), owner
                stack.enter_context(mock.patch.object(owner, attribute, value))
            yield

    apply.edits = items  # type: ignore[attr-defined]  # what :func:`edits_of` reads back
    return apply


def edits_of(patches: Callable[[], ContextManager[Any]]) -> tuple[Edit, ...] | None:
    """The edits a ``patches`` factory made by :func:`edits` applies; None for any other
    factory (its effect is not text edits, so nothing is known of what it replaces)."""
    found = getattr(patches, "edits", None)
    return found if isinstance(found, tuple) else None
