"""``countersign``: run the bot, migrate the database, redrive dead letters.

A configuration problem prints one line per problem and exits with status 2, no traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import secrets
import signal
import sys
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

from aiohttp import web

from approvals import errors, models, pg_store
from approvals.service import utcnow
from bot import config, embedded_pg, logs
from bot.app import BOLT, LIVE, build_app

__all__ = ["main"]

log = logging.getLogger("countersign")

DATABASE_FAILURES: tuple[type[Exception], ...] = (
    OSError,
    ValueError,  # a DSN that does not parse
    *pg_store.DATABASE_UNAVAILABLE,
)
TRYOUT = "COUNTERSIGN_SLACK_STANDIN"
# real Slack credentials: set beside the try-out switch, they mean a mistake, never a mix
SLACK_CREDENTIALS = ("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_APP_TOKEN")


class TryoutConflict(Exception):
    """The try-out switch is on while real Slack credentials are set."""


def tryout_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` for the try-out mode (a local Slack stand-in), or ``env`` itself when it is off.

    The stand-in's token and signing secret are drawn at random for each start, so nobody can
    forge a click with a secret read in this repository; it listens on loopback unless ``HOST``
    is set explicitly. Raises TryoutConflict when real Slack credentials are set as well.
    """
    if env.get(TRYOUT) != "1":
        return env
    clashing = [name for name in SLACK_CREDENTIALS if env.get(name)]
    if clashing:
        raise TryoutConflict(
            f"{TRYOUT}=1 (try-out mode, a local Slack stand-in) but {', '.join(clashing)} "
            f"{'is' if len(clashing) == 1 else 'are'} set: unset {TRYOUT} to use Slack, "
            "or unset the Slack credentials to try it out locally"
        )
    return {
        **env,
        "SLACK_BOT_TOKEN": "xoxb-standin-" + secrets.token_hex(16),
        "SLACK_SIGNING_SECRET": secrets.token_hex(32),
        "HOST": env.get("HOST") or "127.0.0.1",
    }


@contextlib.contextmanager
def _database(settings_env: dict[str, str]) -> Iterator[str]:
    """``DATABASE_URL``, or an embedded PostgreSQL under the data directory."""
    url = settings_env.get("DATABASE_URL")
    if url:
        yield url
        return
    data_dir = Path(settings_env.get("COUNTERSIGN_DATA_DIR", ".countersign")) / "pgdata"
    with embedded_pg.embedded_postgres(data_dir.resolve()) as dsn:
        yield dsn


async def _serve(env: dict[str, str], dsn: str) -> int:
    standin = None
    if env.get(TRYOUT) == "1":
        # Local try-out without a workspace: the Slack Web API stand-in on loopback.
        from tests.slack_standin import SlackStandIn, SlackUser

        standin = SlackStandIn(
            token=env["SLACK_BOT_TOKEN"],
            users=[
                SlackUser(id="U0ANA", name="ana", email="ana@example.com"),
                SlackUser(id="U0BEN", name="ben", email="ben@example.com"),
            ],
            # the example policy's user groups, so clicks can settle in this try-out mode
            usergroups={
                "S0APPROVERS": [],
                "S0FINANCE": ["U0BEN"],
                "S0SALESLEAD": ["U0BEN"],
                "S0SUPPORT": [],
            },
        )
        env = {**env, "SLACK_API_URL": await standin.start()}
    try:
        cfg = config.load(env)
    except errors.PolicyError as exc:
        _print_problems(exc)
        return 2
    store = await pg_store.PostgresStore.connect(dsn)
    app = await build_app(cfg, store, clock=utcnow, reload_env=env)
    # at SIGTERM, long-polls still open get 5 s, then are cut (agents' clients retry)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=5.0)
    await runner.setup()
    site = web.TCPSite(runner, cfg.settings.host, cfg.settings.port)
    await site.start()
    socket_mode = None
    if cfg.settings.slack_app_token is not None:
        # Socket Mode: Slack's events come over a websocket, no public URL needed
        from slack_bolt.adapter.socket_mode.aiohttp import AsyncSocketModeHandler

        socket_mode = AsyncSocketModeHandler(
            app[BOLT], cfg.settings.slack_app_token.get_secret_value()
        )
        await socket_mode.connect_async()  # type: ignore[no-untyped-call]
    log.info(
        "countersign serving",
        extra={"action": "start", "port": cfg.settings.port, "policy": cfg.policy.version},
    )
    if standin is not None:
        print(
            f"countersign: try-out mode on http://{cfg.settings.host}:{cfg.settings.port}: no "
            f"SLACK_BOT_TOKEN, so Slack is a local stand-in at {env['SLACK_API_URL']}; its "
            "signing secret was drawn at random for this start (set HOST to listen elsewhere)",
            flush=True,
        )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, app[LIVE].reload)
    try:
        await stop.wait()
    finally:
        log.info("countersign stopping", extra={"action": "stop"})
        if socket_mode is not None:
            await socket_mode.close_async()  # type: ignore[no-untyped-call]
        await runner.cleanup()
        await store.close()
        if standin is not None:
            await standin.stop()
    return 0


def _print_problems(exc: errors.PolicyError) -> None:
    print("countersign: configuration problems:", file=sys.stderr)
    for problem in exc.problems:
        print(f"  - {problem}", file=sys.stderr)


def _check_config(env: dict[str, str]) -> int:
    """Fail fast, before starting a database, when the configuration is wrong."""
    try:
        config.load(env)
    except errors.PolicyError as exc:
        _print_problems(exc)
        return 2
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="countersign", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="migrate, then serve the webhook and Slack (HTTP mode)")
    sub.add_parser("migrate", help="apply database migrations and exit")
    sub.add_parser("check", help="validate the environment and the policy file")
    redrive = sub.add_parser("redrive", help="retry an approval's dead-lettered deliveries")
    redrive.add_argument("approval_id")
    audit = sub.add_parser("audit", help="the audit trail")
    audit_sub = audit.add_subparsers(dest="audit_command", required=True)
    export = audit_sub.add_parser("export", help="attempts and settlements as JSON Lines")
    export.add_argument(
        "--since", required=True, type=_timestamp, help="ISO 8601, e.g. 2026-12-01T00:00Z"
    )
    export.add_argument("--output", "-o", default="-", help="file to write (default: stdout)")
    sub.add_parser(
        "mcp-permission",
        help="Claude Code's permission-prompt tool: an MCP server on stdio (COUNTERSIGN_URL, "
        "COUNTERSIGN_TOKEN)",
    )
    args = parser.parse_args(argv)
    if args.command == "mcp-permission":
        # the agent side: needs only the client (and the claude-code extra), no server config
        from countersign_client.adapters import claude_code

        claude_code.main()
        return 0
    try:
        env = tryout_env(dict(os.environ))
    except TryoutConflict as exc:
        print(f"countersign: {exc}", file=sys.stderr)
        return 2
    level = env.get("LOG_LEVEL", "INFO").upper()
    # an invalid level is reported by the configuration check below, with the others
    logs.setup(level if level in logging.getLevelNamesMapping() else "INFO")

    if args.command == "check":
        status = _check_config(env)
        if status == 0:
            print("configuration OK")
        return status
    if args.command == "run" and (status := _check_config(env)) != 0:
        return status
    try:
        with _database(env) as dsn:
            if args.command == "migrate":
                applied = asyncio.run(pg_store.migrate(dsn))
                print(f"applied migrations: {applied or 'none (up to date)'}")
                return 0
            if args.command == "redrive":
                return asyncio.run(_redrive(dsn, args.approval_id))
            if args.command == "audit":
                return _audit_export(dsn, args.since, args.output)
            asyncio.run(pg_store.migrate(dsn))
            return asyncio.run(_serve(env, dsn))
    except DATABASE_FAILURES as exc:
        # a DSN that does not parse, a server that does not answer: one line, no traceback
        print(f"countersign: DATABASE_URL: cannot use the database: {exc}", file=sys.stderr)
        return 2


def _timestamp(text: str) -> datetime:
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


async def _audit_events(dsn: str, since: datetime) -> list[models.AuditEvent]:
    store = await pg_store.PostgresStore.connect(dsn, listen=False)
    try:
        return await store.audit_since(since)
    finally:
        await store.close()


def _audit_export(dsn: str, since: datetime, output: str) -> int:
    events = asyncio.run(_audit_events(dsn, since))
    lines = "".join(e.model_dump_json() + "\n" for e in events)
    if output == "-":
        sys.stdout.write(lines)
    else:
        Path(output).write_text(lines, "utf-8")
        print(f"{len(events)} events written to {output}", file=sys.stderr)
    return 0


async def _redrive(dsn: str, approval_id: str) -> int:
    store = await pg_store.PostgresStore.connect(dsn, listen=False)
    try:
        count = await store.redrive(approval_id, utcnow(), [models.card_update(approval_id)])
    finally:
        await store.close()
    print(f"{count} dead-lettered deliveries of {approval_id} are due again")
    return 0 if count else 1


if __name__ == "__main__":
    sys.exit(main())
