"""The CLI reads its settings once, and only a database that cannot be started, reached or
migrated is reported as one line about DATABASE_URL; any other failure is not disguised."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from tests.support.cli import run_cli

ROOT = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLACK_", "HOST", "DATABASE_URL", "LOG_LEVEL"))
    }
    return {**env, **extra}


async def test_migrate_reads_database_url_and_needs_no_slack(database_url: str) -> None:
    # each test database comes from a migrated template: nothing is left to apply
    result = await run_cli("migrate", env=_env(DATABASE_URL=database_url))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "applied migrations: none (up to date)\n"


async def test_an_unreachable_database_is_one_line_and_status_2() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: a refused connection
        result = await run_cli(
            "migrate", env=_env(DATABASE_URL=f"postgresql://nobody@127.0.0.1:{port}/none")
        )
    assert result.returncode == 2
    assert result.stderr.startswith("countersign: DATABASE_URL: cannot use the database: ")
    assert "Traceback" not in result.stderr


async def test_a_port_in_use_says_so_in_one_line(database_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        env = _env(
            COUNTERSIGN_SLACK_STANDIN="1",
            COUNTERSIGN_CONFIG=str(ROOT / "countersign.example.yml"),
            SALES_BOT_TOKEN="cli-test-sales-bot-token",
            SALES_BOT_SIGNING="cli-test-sales-bot-signing",
            DATABASE_URL=database_url,
            PORT=str(taken.getsockname()[1]),
        )
        port = taken.getsockname()[1]
        result = await run_cli("run", env=env)
    assert result.returncode == 2
    assert result.stderr.startswith(f"countersign: PORT: {port} is already in use (")
    assert result.stderr.count("\n") == 1, result.stderr  # one line: no traceback, no log
    assert "cannot use the database" not in result.stderr


async def test_an_unknown_log_level_is_a_configuration_problem(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    result = await run_cli(
        "migrate", env=_env(LOG_LEVEL="loud", COUNTERSIGN_DATA_DIR=str(data_dir))
    )
    assert result.returncode == 2
    assert result.stderr.startswith("countersign: configuration problems:\n  - LOG_LEVEL: ")
    assert "Traceback" not in result.stderr
    assert not data_dir.exists()  # failed fast: no database was started


async def test_an_audit_export_that_cannot_be_written_is_one_line(
    database_url: str, tmp_path: Path
) -> None:
    target = tmp_path / "missing-folder" / "audit.jsonl"
    result = await run_cli(
        "audit",
        "export",
        "--since",
        "2026-01-01T00:00:00Z",
        "-o",
        str(target),
        env=_env(DATABASE_URL=database_url),
    )
    assert result.returncode == 1
    assert result.stderr.startswith(f"audit export: cannot write {target}: ")
    assert "Traceback" not in result.stderr


async def test_init_writes_the_example_policy_and_the_manifest_and_keeps_what_exists(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(ROOT)  # as an installed package would be found from any folder
    result = await run_cli("init", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "countersign.yml").read_bytes() == (
        ROOT / "countersign.example.yml"
    ).read_bytes()
    assert (tmp_path / "manifest.yml").read_bytes() == (ROOT / "manifest.yml").read_bytes()

    (tmp_path / "countersign.yml").write_text("# mine\n", "utf-8")
    again = await run_cli("init", env=env, cwd=tmp_path)
    assert again.returncode == 1  # nothing written
    assert "countersign.yml exists: left as it is" in again.stderr
    assert (tmp_path / "countersign.yml").read_text("utf-8") == "# mine\n"
    forced = await run_cli("init", "--force", env=env, cwd=tmp_path)
    assert forced.returncode == 0
    assert (tmp_path / "countersign.yml").read_bytes() == (
        ROOT / "countersign.example.yml"
    ).read_bytes()
