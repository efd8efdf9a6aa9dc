"""--impl specs: reference, python:MODULE:FACTORY, and errors that say what to do."""

from __future__ import annotations

import sys
import textwrap

import pytest

from harness.contract import ImplementationInfo
from harness.contract.errors import ImplementationLoadError
from harness.implementations.specs import resolve, valid_forms


@pytest.fixture
def impl_module(tmp_path, monkeypatch):
    (tmp_path / "my_iut_for_tests.py").write_text(textwrap.dedent("""
        from harness.contract import ImplementationInfo

        class Impl:
            info = ImplementationInfo("mine", "0.1")
            def open(self, data_dir, world): ...
            def inspect(self, data_dir): ...

        def make():
            return Impl()

        def broken():
            raise ValueError("no config")

        def wrong():
            return object()

        class ns:
            make = staticmethod(make)

        not_callable = 3
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_iut_for_tests"
    sys.modules.pop("my_iut_for_tests", None)


def test_python_spec_imports_and_calls_the_factory(impl_module):
    impl = resolve(f"python:{impl_module}:make")
    assert impl.info == ImplementationInfo("mine", "0.1")
    assert resolve(f"python:{impl_module}:ns.make").info.name == "mine"


@pytest.mark.parametrize(
    "spec, message",
    [
        ("", "is not a known implementation spec; valid forms: reference, python:MODULE:FACTORY"),
        ("podman:img", "is not a known implementation spec"),
        ("python:", "expected python:MODULE:FACTORY"),
        ("python:only_module", "expected python:MODULE:FACTORY"),
        ("python:no_such_module_xyz:make", "module 'no_such_module_xyz' not found"),
        ("python:{m}:missing", "has no attribute 'missing'"),
        ("python:{m}:not_callable", "is not callable"),
        ("python:{m}:broken", "broken() raised ValueError: no config"),
        ("python:{m}:wrong", "does not satisfy harness.contract.Implementation (missing: info"),
    ],
)
def test_bad_specs_say_what_is_wrong(impl_module, spec, message):
    with pytest.raises(ImplementationLoadError) as caught:
        resolve(spec.format(m=impl_module))
    assert message in str(caught.value)
    assert caught.value.exit_code == 2


def test_valid_forms_are_listed():
    assert valid_forms()[:2] == ("reference", "python:MODULE:FACTORY")


def test_reference_resolves_to_the_reference_implementation():
    impl = resolve("reference")
    assert isinstance(impl.info, ImplementationInfo) and impl.info.name == "reference"
    assert callable(impl.open) and callable(impl.inspect)
