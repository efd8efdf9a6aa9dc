"""fixture_source: fixtures are asked of the implementation; the fallback stays in its folder."""

from __future__ import annotations

import pytest

import reference_impl
from harness.scenarios import fixture_source
from harness.contract import CHECKPOINT_FIXTURE_BYTES_MAX, CheckpointFixture
from harness.scenarios.fixture_source import FixtureError, FixtureNotFound, read_below


@pytest.fixture
def package(tmp_path):
    root = tmp_path / "pkg"
    (root / "sub" / "fixtures").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "sub" / "__init__.py").write_text("")
    return root


def test_found_from_the_module_folder_up_to_the_root_with_its_sidecar(package):
    (package / "fixtures").mkdir()
    (package / "fixtures" / "v1.json").write_bytes(b'{"v": 1}')
    (package / "fixtures" / "v1.expect.json").write_text('{"messages": [{"role": "user"}]}')
    found = read_below(package, "fixtures/v1.json", package / "sub")
    assert found == CheckpointFixture(b'{"v": 1}', ({"role": "user"},))


@pytest.mark.parametrize("declared, says", [
    ("../outside.json", "outside the implementation's folder"),
    ("/etc/hostname", "absolute"),
    ("", "absolute or empty"),
    ("sub/../../outside.json", "outside the implementation's folder"),
])
def test_paths_leaving_the_folder_are_errors_naming_them(package, declared, says):
    (package.parent / "outside.json").write_text("{}")
    with pytest.raises(FixtureError, match=says) as caught:
        read_below(package, declared)
    assert repr(declared) in str(caught.value)


def test_a_sidecar_linked_out_of_the_folder_is_ignored(package, tmp_path):
    (package / "v1.json").write_bytes(b"{}")
    (tmp_path / "secret.json").write_text('{"messages": [{"role": "user", "content": "s"}]}')
    (package / "v1.expect.json").symlink_to(tmp_path / "secret.json")
    assert read_below(package, "v1.json").expected_messages is None


def test_missing_and_oversized(package):
    with pytest.raises(FixtureNotFound, match="was not found below"):
        read_below(package, "nope.json")
    (package / "big.json").write_bytes(b"x" * (CHECKPOINT_FIXTURE_BYTES_MAX + 1))
    with pytest.raises(FixtureError, match="larger than"):
        read_below(package, "big.json")


def test_an_offering_implementation_is_asked_and_never_read_from_disk():
    class Offering:
        def checkpoint_fixture(self, name):
            return b"from the implementation: " + name.encode()

    assert fixture_source.fetch(Offering(), "/etc/passwd").content == \
        b"from the implementation: /etc/passwd"

    class Wrong:
        def checkpoint_fixture(self, name):
            return "text"

    with pytest.raises(FixtureError, match="not bytes or a CheckpointFixture"):
        fixture_source.fetch(Wrong(), "v1.json")


def test_the_package_root_is_the_outermost_package():
    impl = reference_impl.implementation()
    assert fixture_source.package_root(impl) == \
        __import__("pathlib").Path(reference_impl.__file__).resolve().parent
    assert fixture_source.fetch(impl, "fixtures/checkpoints/v1_basic.json").expected_messages
