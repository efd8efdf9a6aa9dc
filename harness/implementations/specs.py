"""Turn an ``--impl`` spec into an implementation under test.

Guarantees: :func:`resolve` either returns an object that satisfies
:class:`harness.contract.Implementation` (``info`` is an ``ImplementationInfo``; ``open`` and
``inspect`` are callable) or raises :class:`~harness.contract.errors.ImplementationLoadError` whose
message says what was wrong, where, and lists the valid forms. Nothing is imported or
constructed before the spec has been parsed.

Forms (more may be registered, e.g. out-of-process launchers, with :func:`register`):

* ``reference`` — the embedded reference implementation, ``reference_impl.implementation()``;
* ``mutant:NAME`` — the reference with one self-test mutant applied (see harness.campaigns.selftest);
* ``python:MODULE:FACTORY`` — import ``MODULE`` and call ``FACTORY()`` (no arguments); the
  result is wrapped in an :class:`InProcessImplementation`: its ``info`` is read once, checked
  field by field against the contract (:mod:`harness.contract.value_checks`) and kept, so the
  suite and the reports never read it again (the runner re-reads it per scenario through
  :meth:`InProcessImplementation.read_info` and fails the scenario if reading raises or
  gives another value);
* ``process:COMMAND`` — run ``COMMAND`` (split with shlex) as a child process speaking the
  wire protocol of ``docs/protocol.md`` (:mod:`harness.remote.launcher`);
* ``docker:IMAGE`` — run the image with ``docker run`` speaking the same protocol
  (:mod:`harness.remote.docker`; needs a reachable Docker engine);
* ``adapter:NAME`` — a real library under the contract (:mod:`harness.adapters`), i.e. the
  ``process:`` spec of its wire-protocol server; an adapter whose library is not installed
  is a load error naming the install command.
"""

from __future__ import annotations

import weakref

import importlib
from typing import Callable

from typing import Any

from harness.contract import Implementation, ImplementationInfo, Observation, Runtime, World
from harness.contract.value_checks import value_problem
from harness.contract.errors import ImplementationLoadError

REFERENCE = "reference"
PYTHON_PREFIX = "python:"

Loader = Callable[[str], Implementation]
"""Gets the part of the spec after ``<scheme>:`` and returns the implementation."""

_SCHEMES: dict[str, tuple[Loader, str]] = {}


def register(scheme: str, loader: Loader, form: str) -> None:
    """Add a spec form ``<scheme>:...`` handled by ``loader``; ``form`` documents it."""
    _SCHEMES[scheme] = (loader, form)


def valid_forms() -> tuple[str, ...]:
    return (REFERENCE,) + tuple(form for _, form in _SCHEMES.values())


def _valid_forms_text() -> str:
    return "valid forms: " + ", ".join(valid_forms())


def resolve(spec: str) -> Implementation:
    """The implementation named by ``spec``, checked against the contract's Protocol."""
    spec = spec.strip()
    if spec == REFERENCE:
        implementation = _load_reference()
    else:
        scheme, sep, rest = spec.partition(":")
        if not sep or scheme not in _SCHEMES:
            raise ImplementationLoadError(
                f"--impl {spec!r} is not a known implementation spec; {_valid_forms_text()}"
            )
        loader, _ = _SCHEMES[scheme]
        implementation = loader(rest)
    return _checked(spec, implementation)


def _load_reference() -> Implementation:
    try:
        module = importlib.import_module("reference_impl")
    except Exception as exc:
        raise ImplementationLoadError(
            f"--impl reference: cannot import reference_impl ({type(exc).__name__}: {exc}); "
            "reinstall with `pip install -e .`"
        ) from exc
    factory = getattr(module, "implementation", None)
    if not callable(factory):
        raise ImplementationLoadError(
            "--impl reference: reference_impl has no implementation() factory; "
            "the reference implementation is missing from this installation"
        )
    return _call("reference", factory, "reference_impl.implementation")


def _load_python(rest: str) -> Implementation:
    module_name, sep, factory_name = rest.rpartition(":")
    spec = PYTHON_PREFIX + rest
    if not sep or not module_name or not factory_name:
        raise ImplementationLoadError(
            f"--impl {spec!r}: expected python:MODULE:FACTORY (e.g. "
            f"python:my_runtime.harness:implementation); {_valid_forms_text()}"
        )
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ImplementationLoadError(
            f"--impl {spec!r}: module {module_name!r} not found ({exc}); install it or "
            "add its folder to PYTHONPATH"
        ) from exc
    except Exception as exc:
        raise ImplementationLoadError(
            f"--impl {spec!r}: importing {module_name!r} raised {type(exc).__name__}: {exc}"
        ) from exc
    factory = module
    for part in factory_name.split("."):
        factory = getattr(factory, part, None)
        if factory is None:
            raise ImplementationLoadError(
                f"--impl {spec!r}: module {module_name!r} has no attribute {factory_name!r}; "
                "name a function or class that returns the implementation"
            )
    if not callable(factory):
        raise ImplementationLoadError(
            f"--impl {spec!r}: {module_name}.{factory_name} is not callable "
            f"({type(factory).__name__}); name a zero-argument factory"
        )
    return InProcessImplementation(spec, _call(spec, factory, f"{module_name}.{factory_name}"))


class InProcessImplementation:
    """A ``python:`` implementation behind a stable, checked ``info``.

    ``open`` and ``inspect`` are the implementation's own (the runner checks what they
    return); any other attribute (``release``, ``fixture_root``, ``crash_mode``...) is looked
    up on it; checkpoint fixtures are found below its own package."""

    def __init__(self, spec: str, inner: Any) -> None:
        self.inner = inner
        self.spec = spec
        self.fixture_module = (getattr(inner, "fixture_module", None)
                               or type(inner).__module__)
        try:
            info = inner.info  # the one read at load
        except AttributeError:
            info = None  # reported as missing below
        except Exception as exc:
            raise ImplementationLoadError(
                f"--impl {spec!r}: reading its info raised {type(exc).__name__}: {exc}"
            ) from exc
        if isinstance(info, ImplementationInfo):
            problem = value_problem(ImplementationInfo, info, "its info is")
            if problem:
                raise ImplementationLoadError(f"--impl {spec!r}: {problem}")
        _checked(spec, _Described(inner, info))
        self.info: ImplementationInfo = info
        self.freeze_process_clock = True
        """Its code runs in this process and may read ``time``/``datetime``: the runner
        holds that clock at the world's (``--no-freeze-clock`` sets this False)."""

    def read_info(self) -> ImplementationInfo:
        """The implementation's ``info`` read again (it may raise: the runner reports it)."""
        info = self.inner.info
        if info != self.info:
            raise ValueError(f"it changed after load: {info!r} (at load: {self.info!r}); "
                             "info must be a constant")
        return info

    def open(self, data_dir: str, world: World) -> Runtime:
        return self.inner.open(data_dir, world)

    def inspect(self, data_dir: str) -> Observation:
        return self.inner.inspect(data_dir)

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"InProcessImplementation({self.spec!r}, {self.inner!r})"


def _call(spec: str, factory: Callable[[], object], where: str) -> Implementation:
    try:
        return factory()  # type: ignore[return-value]
    except Exception as exc:
        raise ImplementationLoadError(
            f"--impl {spec!r}: {where}() raised {type(exc).__name__}: {exc}"
        ) from exc


class _Described:
    """An implementation whose ``info`` was already read (so :func:`_checked` reads it once)."""

    def __init__(self, inner: Any, info: Any) -> None:
        self.info = info
        self.open = getattr(inner, "open", None)
        self.inspect = getattr(inner, "inspect", None)
        self._type = type(inner).__name__


def _checked(spec: str, implementation: object) -> Implementation:
    missing = [
        name
        for name in ("open", "inspect")
        if not callable(getattr(implementation, name, None))
    ]
    info = getattr(implementation, "info", None)
    if not isinstance(info, ImplementationInfo):
        missing.insert(0, "info: ImplementationInfo")
    if missing:
        raise ImplementationLoadError(
            f"--impl {spec!r}: the factory returned "
            f"{getattr(implementation, '_type', type(implementation).__name__)}, which "
            f"does not satisfy harness.contract.Implementation (missing: {', '.join(missing)})"
        )
    return implementation  # type: ignore[return-value]


register("python", _load_python, "python:MODULE:FACTORY")


def _load_mutant(name: str) -> Implementation:
    """The reference with one self-test mutant's defect applied (replays kill-matrix rows)."""
    from harness.mutants.mutant import MutantImplementation
    from harness.mutants.catalogue import MUTANTS

    for mutant in MUTANTS:
        if mutant.name == name:
            return MutantImplementation(_load_reference(), mutant)
    known = ", ".join(m.name for m in MUTANTS)
    raise ImplementationLoadError(
        f"--impl mutant:{name}: no such mutant; `lifecycle-harness list mutants` names them "
        f"({known})"
    )


register("mutant", _load_mutant, "mutant:NAME")


def _load_process(command: str, startup_timeout_s: float | None = None) -> Implementation:
    """A child process speaking the wire protocol; loading it runs its handshake once.
    ``startup_timeout_s`` raises the ceiling of the wait for its ``initialize`` (an adapter
    whose library takes long to import; the run's time limit still bounds it)."""
    import shlex

    from harness.remote.launcher import ProcessImplementation

    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ImplementationLoadError(
            f"--impl process:{command}: cannot split the command ({exc}); quote it as a shell "
            "would, e.g. --impl \"process:python -m reference_impl.remote\""
        ) from exc
    if not argv:
        raise ImplementationLoadError(
            "--impl process: needs a command, e.g. "
            "--impl \"process:python -m reference_impl.remote\"; see docs/protocol.md"
        )
    implementation = (ProcessImplementation(argv) if startup_timeout_s is None
                      else ProcessImplementation(argv, startup_timeout_s=startup_timeout_s))
    implementation.info  # noqa: B018 - the handshake: fails here, not in the middle of a run
    return implementation


def _load_docker(image: str) -> Implementation:
    from harness.remote.docker import DockerImplementation

    implementation = DockerImplementation(image.strip())
    implementation.info  # noqa: B018 - the handshake (after the engine check)
    return implementation


register("process", _load_process, "process:COMMAND")
register("docker", _load_docker, "docker:IMAGE")


def _load_profile(name: str) -> Implementation:
    """The reference under a documented runtime's policies (harness.profiles); with
    ``@cli``, seen as its real CLI is (harness.implementations.profile_outside)."""
    from harness.implementations import profile_outside
    from harness.profiles import load

    if name.strip().endswith(profile_outside.SUFFIX):
        return profile_outside.load(name)
    return load(name)


register("profile", _load_profile, "profile:NAME[@cli]")

def _load_adapter(name: str) -> Implementation:
    from harness.adapters import available, find

    adapter = find(name.strip())
    if adapter is None:
        known = ", ".join(info.name for info in available())
        raise ImplementationLoadError(
            f"--impl adapter:{name}: no such adapter; known adapters: {known}")
    if not adapter.installed:
        raise ImplementationLoadError(f"--impl adapter:{name}: {adapter.missing_reason}")
    implementation = _load_process(adapter.impl_spec.removeprefix("process:"),
                                   adapter.startup_timeout_s)
    if adapter.not_applicable:  # what the installed library lacks, or the adapter cannot see
        _DECLARED_NOT_APPLICABLE[implementation] = dict(adapter.not_applicable)
    return implementation


register("adapter", _load_adapter, "adapter:NAME")

_DECLARED_NOT_APPLICABLE: "weakref.WeakKeyDictionary[Any, dict[str, str]]" = \
    weakref.WeakKeyDictionary()
"""The adapters this module loaded, with the criteria they cannot be judged on."""


def not_applicable_of(implementation: Any) -> dict[str, str] | None:
    """Criterion id -> why ``implementation``'s system cannot be judged on it: a profile's
    n/a table (:mod:`harness.profiles`), or what an adapter loaded here declared (its
    library lacks the concept, or the adapter cannot see it); None for anything else. An
    implementation under test cannot declare criteria away: only the harness's own
    profiles and adapters are read."""
    from harness.profiles import ProfileImplementation

    if isinstance(implementation, ProfileImplementation):
        return implementation.profile.inapplicable() or None
    try:
        return _DECLARED_NOT_APPLICABLE.get(implementation)
    except TypeError:  # not weak-referenceable: not one of the adapters
        return None

def _load_cli(name: str) -> Implementation:
    """A real agent CLI as a black box (harness.clis); its binary from PATH or --cli-path."""
    from harness.clis import load

    return load(name)


register("cli", _load_cli, "cli:NAME")
