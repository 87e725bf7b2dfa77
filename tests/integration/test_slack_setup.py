"""Misconfiguration is loud: ``countersign check`` and ``countersign run`` ask Slack about the
token (``auth.test``) and the channels the policy names (``conversations.info``) and report
every problem at once, each naming what to change, with status 2 and no traceback.

The CLI runs as a subprocess, as a user runs it, against the Slack stand-in over HTTP."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import yaml

from bot.sandbox.standin import DEFAULT_SCOPES, SlackStandIn
from tests.support import waiting
from tests.support.cli import run_cli
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "xoxb-setup-test-token"
REVIEWS, ONCALL = "C0REVIEWS", "C0ONCALL"
POLICY = f"""\
slack:
  reviewer_channel: {REVIEWS}
agents:
  sales-bot:
    token_env: SALES_BOT_TOKEN
    callback_hosts: ["127.0.0.1:8088"]
roles:
  approvers: {{users: [U0ANA]}}
oncall:
  channel: {ONCALL}
rules:
  - tool: "*"
    require: approvers
"""


@pytest.fixture
async def standin() -> AsyncIterator[SlackStandIn]:
    server = SlackStandIn(token=TOKEN, channels=[REVIEWS, ONCALL])
    await server.start()
    server.set_channel(REVIEWS, name="reviews")
    server.set_channel(ONCALL, name="on-call")
    yield server
    await server.stop()


def _env(tmp_path: Path, api_url: str, **extra: str) -> dict[str, str]:
    policy_file = tmp_path / "countersign.yml"
    policy_file.write_text(POLICY, "utf-8")
    inherited = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLACK_", "HOST", "DATABASE_URL", "COUNTERSIGN_", "LOG_LEVEL"))
    }
    return {
        **inherited,
        "SLACK_BOT_TOKEN": TOKEN,
        "SLACK_SIGNING_SECRET": "setup-test-signing-secret",
        "SLACK_API_URL": api_url,
        "COUNTERSIGN_CONFIG": str(policy_file),
        "COUNTERSIGN_DATA_DIR": str(tmp_path / "data"),
        "SALES_BOT_TOKEN": "setup-test-sales-bot-token",
        **extra,
    }


def _problems(result: subprocess.CompletedProcess[str]) -> list[str]:
    """The problem lines of a refused start, after checking that it was refused as one."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    # (slack_sdk may log a retry first, as one JSON line)
    _, header, listed = result.stderr.partition("countersign: configuration problems:\n")
    assert header, result.stderr
    lines = listed.splitlines()
    assert all(line.startswith("  - ") for line in lines), lines
    assert "configuration OK" not in result.stdout
    return [line.removeprefix("  - ") for line in lines]


async def test_check_all_good(standin: SlackStandIn, tmp_path: Path) -> None:
    result = await run_cli("check", env=_env(tmp_path, standin.base_url))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "configuration OK\n"
    calls = [method for method, _ in standin.calls]
    assert calls == ["auth.test", "conversations.info", "conversations.info"]
    assert not (tmp_path / "data").exists()  # check starts no database


async def test_check_with_a_bad_token(standin: SlackStandIn, tmp_path: Path) -> None:
    env = _env(tmp_path, standin.base_url, SLACK_BOT_TOKEN="xoxb-not-the-token")
    [problem] = _problems(await run_cli("check", env=env))
    assert problem.startswith("SLACK_BOT_TOKEN: Slack refused it (invalid_auth): ")
    assert "xoxb-not-the-token" not in problem  # never the secret itself


async def test_check_with_the_bot_not_in_the_reviewer_channel(
    standin: SlackStandIn, tmp_path: Path
) -> None:
    standin.set_channel(REVIEWS, is_member=False)
    [problem] = _problems(await run_cli("check", env=_env(tmp_path, standin.base_url)))
    assert problem == (
        "slack.reviewer_channel: #reviews (C0REVIEWS): the bot is not a member: invite it: "
        "/invite @countersign in #reviews"
    )


async def test_check_with_an_archived_oncall_channel(standin: SlackStandIn, tmp_path: Path) -> None:
    standin.set_channel(ONCALL, is_archived=True)
    [problem] = _problems(await run_cli("check", env=_env(tmp_path, standin.base_url)))
    assert problem.startswith("oncall.channel: #on-call (C0ONCALL): the channel is archived")


async def test_a_channel_shared_with_another_organisation_is_warned_of(
    standin: SlackStandIn, tmp_path: Path
) -> None:
    """A Slack Connect reviewer or on-call channel would show arguments outside the company:
    check says so, and still passes (it works; it may be meant)."""
    standin.set_channel(ONCALL, is_ext_shared=True)
    result = await run_cli("check", env=_env(tmp_path, standin.base_url))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "configuration OK\n"
    [warning] = [line for line in result.stderr.splitlines() if "warning" in line]
    assert warning.startswith(
        "countersign: warning: oncall.channel: #on-call (C0ONCALL) is shared with another "
        "organisation (Slack Connect): its cards show tool calls and their arguments to people "
        "outside the company"
    )
    assert "serving anyway" not in warning


async def test_every_problem_is_reported_at_once(standin: SlackStandIn, tmp_path: Path) -> None:
    standin.set_channel(REVIEWS, is_member=False, is_private=True)  # hidden from the bot
    del standin.channels[ONCALL]
    problems = _problems(await run_cli("check", env=_env(tmp_path, standin.base_url)))
    assert [p.split(": ", 1)[0] for p in problems] == ["slack.reviewer_channel", "oncall.channel"]
    assert all("Slack says channel_not_found" in p for p in problems)
    assert all("/invite @countersign" in p for p in problems)


async def test_a_missing_scope_is_named(tmp_path: Path) -> None:
    server = SlackStandIn(
        token=TOKEN, channels=[REVIEWS, ONCALL], scopes=DEFAULT_SCOPES - {"channels:read"}
    )
    await server.start()
    try:
        problems = _problems(await run_cli("check", env=_env(tmp_path, server.base_url)))
    finally:
        await server.stop()
    assert len(problems) == 2
    assert all("missing_scope" in p and "channels:read" in p for p in problems)


async def test_slack_unreachable_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, never listening: a refused connection
        url = f"http://127.0.0.1:{s.getsockname()[1]}/api/"
        [problem] = _problems(await run_cli("check", env=_env(tmp_path, url)))
    assert problem.startswith(f"SLACK_API_URL: cannot reach Slack at {url}: ")


async def test_run_refuses_to_start_on_a_bad_token(standin: SlackStandIn, tmp_path: Path) -> None:
    env = _env(tmp_path, standin.base_url, SLACK_BOT_TOKEN="xoxb-revoked-long-ago")
    [problem] = _problems(await run_cli("run", env=env))
    assert problem.startswith("SLACK_BOT_TOKEN: Slack refused it (invalid_auth)")
    assert not (tmp_path / "data").exists()  # refused before any database started


async def test_tryout_mode_checks_its_own_standin(tmp_path: Path) -> None:
    env = _env(tmp_path, "http://unused.invalid/api/", COUNTERSIGN_SLACK_STANDIN="1")
    for name in ("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_API_URL"):
        del env[name]
    result = await run_cli("check", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "configuration OK\n"


def test_the_standin_token_holds_what_the_manifest_grants() -> None:
    """The stand-in answers like an app created from manifest.yml: same scopes, so a method
    that needs a scope the manifest forgot fails here as it would in a real workspace."""
    manifest = yaml.safe_load((ROOT / "manifest.yml").read_text("utf-8"))
    assert set(manifest["oauth_config"]["scopes"]["bot"]) == DEFAULT_SCOPES


async def test_run_serves_when_slack_does_not_answer_at_start(
    standin: SlackStandIn, tmp_path: Path
) -> None:
    """Slack down (a 5xx) is not a set-up problem: ``run`` warns and serves, the request is
    stored, and its card is posted once Slack answers; ``check`` still fails on it."""
    standin.fail("auth.test", status=503, times=50)
    env = _env(tmp_path, standin.base_url, HOST="127.0.0.1", PORT=str(port := free_port()))
    [problem] = _problems(await run_cli("check", env=env))
    assert problem.startswith("SLACK_API_URL: Slack did not answer auth.test (internal_error")

    bot = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.cli",
        "run",
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with aiohttp.ClientSession() as http:

            async def serving() -> bool:
                try:
                    async with http.get(f"http://127.0.0.1:{port}/healthz") as response:
                        return response.status == 200
                except aiohttp.ClientConnectionError:
                    if bot.returncode is not None:
                        assert bot.stderr is not None
                        said = (await bot.stderr.read()).decode(errors="replace")
                        raise AssertionError(
                            f"the bot exited ({bot.returncode}): {said[-3000:]}"
                        ) from None
                    return False

            await waiting.until(serving, timeout=60, interval=0.2, what="the bot serving")
            standin.clear_failures()  # Slack is back
            body = {
                "request_id": "r-1",
                "session_id": "s-1",
                "tool": {"name": "deploy", "call_id": "c-1", "arguments": {}},
                "requester": {"slack_user_id": "U0REQ", "name": "Rita"},
            }
            headers = {"Authorization": "Bearer setup-test-sales-bot-token"}
            url = f"http://127.0.0.1:{port}/v1/approvals"
            async with http.post(url, json=body, headers=headers) as response:
                assert response.status == 201, await response.text()
            await standin.wait_for(lambda: len(standin.messages.get(REVIEWS, [])) == 1, 15)
    finally:
        if bot.returncode is None:
            bot.terminate()
        _, stderr = await bot.communicate()
    assert "Traceback" not in stderr.decode()
    assert "countersign: warning: SLACK_API_URL: Slack did not answer auth.test" in (
        stderr.decode()
    )


async def test_check_asks_slack_about_the_app_level_token(
    standin: SlackStandIn, tmp_path: Path
) -> None:
    """Socket Mode's token (``SLACK_APP_TOKEN``) is checked too: a wrong one, or the bot token
    put there by mistake, is a problem naming it; the right one passes."""
    standin.socket_mode("xapp-1-the-app-token", lambda: "ws://127.0.0.1:9/unused")
    for wrong, code in (("xapp-1-not-it", "invalid_auth"), (TOKEN, "not_allowed_token_type")):
        env = _env(tmp_path, standin.base_url, SLACK_APP_TOKEN=wrong)
        [problem] = _problems(await run_cli("check", env=env))
        assert problem.startswith(f"SLACK_APP_TOKEN: Slack refused it ({code}): use the app-level")
        assert wrong not in problem
    env = _env(tmp_path, standin.base_url, SLACK_APP_TOKEN="xapp-1-the-app-token")
    result = await run_cli("check", env=env)
    assert (result.returncode, result.stdout) == (0, "configuration OK\n"), result.stderr
    assert [m for m, _ in standin.calls][-4] == "apps.connections.open"
