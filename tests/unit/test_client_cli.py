"""A missing extra is a line naming it, never a traceback (``countersign-mcp-permission``
without ``countersign-client[claude-code]``, ``countersign-mcp-gateway`` without
``countersign-client[mcp]``)."""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

import pytest

from countersign_client import cli


def _without(missing: str, module: str = "countersign_client.adapters.claude_code") -> object:
    real = importlib.import_module

    def import_module(name: str, package: str | None = None) -> ModuleType:
        if name == module:
            raise ModuleNotFoundError(f"No module named {missing!r}", name=missing)
        return real(name, package)

    return import_module


@pytest.mark.parametrize("missing", ["mcp", "mcp_types", "anyio"])
def test_the_missing_extra_is_named(
    missing: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(importlib, "import_module", _without(missing))
    assert cli.mcp_permission() == 2
    err = capsys.readouterr().err
    assert "pip install 'countersign-client[claude-code]'" in err
    assert repr(missing) in err


@pytest.mark.parametrize("missing", ["mcp", "mcp_types", "anyio", "yaml"])
def test_the_gateway_names_its_extra(
    missing: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(
        importlib, "import_module", _without(missing, "countersign_client.gateway.main")
    )
    with pytest.raises(SystemExit) as exited:
        cli.gateway_main()
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("countersign-mcp-gateway needs the mcp extra")
    assert "pip install 'countersign-client[mcp]'" in err
    assert repr(missing) in err


def test_another_missing_module_is_a_bug_and_not_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib, "import_module", _without("something_else"))
    with pytest.raises(ModuleNotFoundError):
        cli.mcp_permission()


def test_the_server_command_points_at_the_client_package(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import countersign_client
    from bot import cli as server_cli

    # as if the client package were not installed
    monkeypatch.setitem(sys.modules, "countersign_client.cli", None)
    monkeypatch.delattr(countersign_client, "cli")
    assert server_cli.main(["mcp-permission"]) == 2
    assert "pip install 'countersign-client[claude-code]'" in capsys.readouterr().err
