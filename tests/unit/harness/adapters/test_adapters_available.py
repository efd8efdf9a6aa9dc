"""``harness.adapters.available()`` and the ``adapter:`` spec, with the libraries present or
made to look absent (no library is imported here)."""

from __future__ import annotations

import importlib.util

import pytest

import harness.adapters as adapters
from harness.contract.errors import ImplementationLoadError
from harness.implementations.specs import resolve

NAMES = ("langgraph-sync", "langgraph-async", "langgraph-exit", "dbos", "openprogram")


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def test_every_adapter_is_listed_with_a_process_spec_and_its_real_install_state():
    infos = adapters.available()
    assert tuple(info.name for info in infos) == NAMES
    langgraph = _installed("langgraph") and _installed("langgraph.checkpoint.sqlite")
    expected = {"langgraph-sync": langgraph, "langgraph-async": langgraph,
                "langgraph-exit": langgraph, "dbos": _installed("dbos"),
                "openprogram": _installed("openprogram")}
    for info in infos:
        assert info.impl_spec.startswith("process:")
        assert info.installed is expected[info.name]
        assert (info.missing_reason == "") is info.installed
    assert "--durability async" in adapters.find("langgraph-async").impl_spec
    assert adapters.find("langgraph") == adapters.find("langgraph-sync")
    assert adapters.find("crewai") is None


def test_a_missing_library_is_reported_with_the_distribution_and_the_install_command(
        monkeypatch):
    real = importlib.util.find_spec

    def without_dbos(name, *args):
        return None if name == "dbos" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", without_dbos)
    dbos = adapters.find("dbos")
    assert not dbos.installed
    assert "'dbos'" in dbos.missing_reason and adapters.INSTALL_HINT in dbos.missing_reason
    with pytest.raises(ImplementationLoadError, match=r"adapter:dbos: .*pip install -e"):
        resolve("adapter:dbos")


def test_a_missing_parent_package_counts_as_missing(monkeypatch):
    def parent_absent(name, *args):
        raise ModuleNotFoundError(f"No module named {name.split('.')[0]!r}")

    monkeypatch.setattr(importlib.util, "find_spec", parent_absent)
    assert not any(info.installed for info in adapters.available())


def test_an_unknown_adapter_names_the_known_ones():
    with pytest.raises(ImplementationLoadError, match="no such adapter; known adapters: "
                                                      "langgraph-sync, langgraph-async"):
        resolve("adapter:crewai")


def test_a_bad_server_option_exits_2_with_the_usage(capsys):
    from harness.adapters.serve import serve_main

    status = serve_main("langgraph_server", ["--durability", "eventually"],
                        {"durability": (("sync", "async", "exit"), "sync")}, object)
    assert status == 2
    assert "'eventually' is not one of sync, async, exit" in capsys.readouterr().err
