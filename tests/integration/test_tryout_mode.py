"""Try-out mode (no SLACK_BOT_TOKEN: a local Slack stand-in) cannot be reached or forged from
outside: loopback unless HOST says otherwise, a signing secret drawn per start, and no mix with
real Slack credentials."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from bot import cli
from tests import slack_requests
from tests.support.ports import free_port

# what this repository published as the try-out secret before it was drawn per start
PUBLISHED_SECRET = "local-standin-signing-secret"
ROOT = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "HOST"))}
    return {
        **env,
        "COUNTERSIGN_CONFIG": str(ROOT / "countersign.example.yml"),
        "SALES_BOT_TOKEN": "tryout-sales-bot-token",
        "SALES_BOT_SIGNING": "tryout-sales-bot-signing",
        **extra,
    }


def test_tryout_draws_its_secrets_per_start_and_listens_on_loopback() -> None:
    first, second = (
        cli.tryout_env(_env(COUNTERSIGN_SLACK_STANDIN="1")),
        cli.tryout_env(_env(COUNTERSIGN_SLACK_STANDIN="1")),
    )
    assert first["HOST"] == "127.0.0.1"
    assert first["SLACK_SIGNING_SECRET"] != second["SLACK_SIGNING_SECRET"]
    assert first["SLACK_BOT_TOKEN"] != second["SLACK_BOT_TOKEN"]
    assert PUBLISHED_SECRET not in (first["SLACK_SIGNING_SECRET"], second["SLACK_SIGNING_SECRET"])
    assert len(first["SLACK_SIGNING_SECRET"]) >= 32


def test_an_explicit_host_is_kept() -> None:
    assert cli.tryout_env(_env(COUNTERSIGN_SLACK_STANDIN="1", HOST="0.0.0.0"))["HOST"] == (  # noqa: S104
        "0.0.0.0"  # noqa: S104
    )


def test_without_the_switch_nothing_changes() -> None:
    env = _env(SLACK_BOT_TOKEN="xoxb-real", SLACK_SIGNING_SECRET="real")
    assert cli.tryout_env(env) is env


@pytest.mark.parametrize("name", ["SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_APP_TOKEN"])
def test_real_credentials_beside_the_switch_refuse_to_start(name: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bot.cli", "run"],
        env=_env(COUNTERSIGN_SLACK_STANDIN="1", **{name: "real-looking-value"}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert name in result.stderr
    assert "COUNTERSIGN_SLACK_STANDIN" in result.stderr
    assert "Traceback" not in result.stderr


async def test_a_click_signed_with_the_published_secret_is_refused(database_url: str) -> None:
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.cli",
        "run",
        env=_env(COUNTERSIGN_SLACK_STANDIN="1", DATABASE_URL=database_url, PORT=str(port)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        assert f"try-out mode on http://127.0.0.1:{port}" in line
        assert "random" in line
        forged = slack_requests.block_actions(
            signing_secret=PUBLISHED_SECRET,
            user_id="U0BEN",
            action_id="countersign_approve",
            value="apr_" + "0" * 24,
        )
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                f"http://127.0.0.1:{port}/slack/events",
                data=forged.body,
                headers=forged.headers,
            ) as response,
        ):
            assert response.status == 401
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)
