"""What users install is what the design says: both wheels are built from the checkout, as
``pip wheel`` builds them (offline: the build backend is the venv's), and their contents read.

The server wheel holds the design's folders (``approvals``, ``guards``, ``bot``) with the data
files it runs on (migrations, the policy and manifest templates ``countersign init`` writes, the
sandbox page) and no tests; the client wheel holds only ``countersign_client`` and needs only
aiohttp, pydantic and rfc8785, with one extra per framework."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from email.message import Message
from email.parser import Parser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "python"
FRAMEWORKS = {"maf", "ag-ui", "langgraph", "openai-agents", "claude-code", "mcp"}


def _build(project: Path, into: Path) -> zipfile.ZipFile:
    subprocess.run(  # noqa: S603 - our own interpreter on our own checkout
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",  # the venv's setuptools and wheel: nothing is fetched
            "--wheel-dir",
            str(into),
            str(project),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    [wheel] = into.glob("*.whl")
    return zipfile.ZipFile(wheel)


def _top_level(wheel: zipfile.ZipFile) -> set[str]:
    return {
        name.split("/", 1)[0]
        for name in wheel.namelist()
        if not name.split("/", 1)[0].endswith(".dist-info")
    }


def _metadata(wheel: zipfile.ZipFile, name: str) -> tuple[Message, str]:
    [info] = {n.split("/", 1)[0] for n in wheel.namelist() if n.endswith(".dist-info/METADATA")}
    metadata = Parser().parsestr(wheel.read(f"{info}/METADATA").decode())
    entry_points = wheel.read(f"{info}/entry_points.txt").decode()
    assert metadata["Name"] == name
    return metadata, entry_points


def _requires(metadata: Message) -> tuple[set[str], set[str]]:
    """The distributions always required, and the extras offered."""
    requires = metadata.get_all("Requires-Dist") or []
    always = {
        r.split(";")[0].split(">")[0].split("<")[0].split("=")[0].strip()
        for r in requires
        if "extra ==" not in r
    }
    extras = set(metadata.get_all("Provides-Extra") or [])
    return always, extras


# each wheel is built once per module: its tests on one worker under pytest-xdist
pytestmark = pytest.mark.xdist_group("packaging")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    return _build(ROOT, tmp_path_factory.mktemp("server"))


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    return _build(CLIENT, tmp_path_factory.mktemp("client"))


def test_the_server_wheel_holds_the_design_folders_and_no_tests(server: zipfile.ZipFile) -> None:
    assert _top_level(server) == {"approvals", "guards", "bot"}
    names = set(server.namelist())
    assert not any(n.startswith("tests/") or "/tests/" in n for n in names)
    # the data files it runs on: every migration, the templates init writes, the sandbox page
    shipped = [
        *(ROOT / "approvals" / "sql").rglob("*.sql"),
        *(ROOT / "bot" / "templates").glob("*.yml"),
        *(ROOT / "bot" / "sandbox" / "static").glob("*"),
    ]
    missing = [str(p.relative_to(ROOT)) for p in shipped if str(p.relative_to(ROOT)) not in names]
    assert missing == []
    metadata, entry_points = _metadata(server, "countersign-bot")
    always, _ = _requires(metadata)
    assert "countersign-client" not in always  # the server does not need the agent side
    assert "countersign = bot.cli:main" in entry_points


def test_the_templates_in_the_wheel_are_the_files_of_the_checkout(
    server: zipfile.ZipFile,
) -> None:
    for name in ("countersign.example.yml", "manifest.yml"):
        assert server.read(f"bot/templates/{name}") == (ROOT / name).read_bytes()


def test_the_client_wheel_stands_alone(client: zipfile.ZipFile) -> None:
    assert _top_level(client) == {"countersign_client"}
    assert "countersign_client/py.typed" in client.namelist()
    metadata, entry_points = _metadata(client, "countersign-client")
    always, extras = _requires(metadata)
    assert always == {"aiohttp", "pydantic", "rfc8785"}  # no slack-bolt, asyncpg, pgserver
    assert extras == FRAMEWORKS
    assert "countersign-mcp-permission = countersign_client.cli:main" in entry_points
    assert "countersign-mcp-gateway = countersign_client.cli:gateway_main" in entry_points
