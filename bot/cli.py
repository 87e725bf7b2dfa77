"""``countersign``: run the bot, migrate the database, redrive dead letters, export, seal and
verify the audit.

A configuration problem prints one line per problem and exits with status 2, no traceback; so
does a Slack side that is not set up (a token Slack refuses, a channel the bot is not in: what
``check`` and ``run`` ask Slack, see bot/slack_setup.py) and a database that cannot be started,
reached or migrated.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import json
import logging
import os
import secrets
import shlex
import signal
import sys
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

import aiohttp
from aiohttp import web

from approvals import audit_chain, errors, models, pg_db, resource
from approvals.repository import Repository
from bot import config, embedded_pg, logs, memory, oidc, slack_setup
from bot.app import BOLT, LIVE, build_app, slack_client
from bot.init import write_templates
from bot.sandbox import sign_in_standin

__all__ = [
    "SLACK_CREDENTIALS",
    "TRYOUT",
    "DatabaseUnusable",
    "PortInUse",
    "TryoutConflict",
    "main",
    "tryout_env",
]

log = logging.getLogger("countersign")

DATABASE_FAILURES: tuple[type[Exception], ...] = (
    OSError,
    ValueError,  # a DSN that does not parse
    *pg_db.DATABASE_UNAVAILABLE,
)
TRYOUT = "COUNTERSIGN_SLACK_STANDIN"
# real Slack credentials: set beside the try-out switch, they mean a mistake, never a mix
SLACK_CREDENTIALS = ("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_APP_TOKEN")
# the commands that need Slack and the policy file; the others only use the database
WHOLE_CONFIG = ("run", "check")


class TryoutConflict(Exception):
    """The try-out switch is on while real Slack credentials are set."""


class DatabaseUnusable(Exception):
    """The database could not be started, reached or migrated (one line, status 2)."""


class PortInUse(Exception):
    """Another process listens on ``HOST:PORT`` already (one line, status 2)."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__(
            f"PORT: {port} is already in use (another process listens on {host}:{port}: stop "
            "it, or set PORT to a free port)"
        )


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
    tryout = {
        **env,
        "SLACK_BOT_TOKEN": "xoxb-standin-" + secrets.token_hex(16),
        "SLACK_SIGNING_SECRET": secrets.token_hex(32),
        "HOST": env.get("HOST") or "127.0.0.1",
    }
    # step-up (docs/step-up.md) on this machine: the page at localhost, Sign in with Slack
    # answered by the stand-in (the browser's own passkey prompt is real)
    tryout.setdefault("COUNTERSIGN_PUBLIC_URL", f"http://localhost:{env.get('PORT') or 3000}")
    if not env.get("COUNTERSIGN_OIDC_ISSUER"):
        tryout.update(SLACK_CLIENT_ID=sign_in_standin.CLIENT_ID)
        tryout.update(SLACK_CLIENT_SECRET=sign_in_standin.CLIENT_SECRET)
    return tryout


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "mcp-permission":
        return _mcp_permission()
    if args.command == "init":
        return _init(force=args.force)
    try:
        env = tryout_env(dict(os.environ))
        # read once, here, before any database starts: a wrong configuration fails fast
        cfg = config.load(env) if args.command in WHOLE_CONFIG else None
        settings = cfg.settings if cfg is not None else config.load_common(env)
    except TryoutConflict as exc:
        print(f"countersign: {exc}", file=sys.stderr)
        return 2
    except errors.ConfigError as exc:
        _print_problems(exc.problems)
        return 2
    logs.setup(settings.log_level)
    if cfg is not None:
        # Slack is asked before any database starts: a wrong token or channel fails fast
        problems = asyncio.run(_slack_problems(cfg, env))
        # a Slack that did not answer fails a check, but not a start (cards wait for it); a
        # warning fails neither
        refusals = [
            p for p in problems if not p.warning and (p.permanent or args.command == "check")
        ]
        if refusals:
            _print_problems([str(p) for p in refusals])
            return 2
        for problem in problems:
            serving = "" if problem.warning or args.command == "check" else "; serving anyway"
            print(f"countersign: warning: {problem}{serving}", file=sys.stderr)
    if args.command == "check":
        print("configuration OK")
        return 0
    try:
        with _database(settings) as dsn:
            return _on_database(args, dsn, cfg, env)
    except DatabaseUnusable as exc:
        print(f"countersign: DATABASE_URL: cannot use the database: {exc}", file=sys.stderr)
        return 2
    except PortInUse as exc:
        print(f"countersign: {exc}", file=sys.stderr)
        return 2


def _init(*, force: bool) -> int:
    written, kept = write_templates(Path.cwd(), force=force)
    for path in written:
        print(f"wrote {path.name}")
    for path in kept:
        print(f"{path.name} exists: left as it is (--force overwrites it)", file=sys.stderr)
    if written:
        print(
            "next: edit countersign.yml (channels, roles, agents), create the Slack app from "
            "manifest.yml, then `countersign check`"
        )
    return 1 if kept and not written else 0


def _mcp_permission() -> int:
    """The agent side, kept here for ``countersign mcp-permission``: it needs only the client
    package (and its claude-code extra), no server configuration."""
    try:
        from countersign_client import cli as client_cli
    except ModuleNotFoundError:
        print(
            "countersign mcp-permission needs the client package: "
            "pip install 'countersign-client[claude-code]' (its own command is "
            "countersign-mcp-permission)",
            file=sys.stderr,
        )
        return 2
    return client_cli.mcp_permission()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="countersign", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    init = sub.add_parser(
        "init", help="write countersign.yml (the example policy) and manifest.yml here"
    )
    init.add_argument("--force", action="store_true", help="overwrite files that exist")
    sub.add_parser("run", help="migrate, then serve the webhook and Slack (HTTP mode)")
    sub.add_parser("migrate", help="apply database migrations and exit")
    sub.add_parser(
        "check",
        help="validate the environment and the policy file, and ask Slack about the token and "
        "the channels",
    )
    redrive = sub.add_parser("redrive", help="retry an approval's dead-lettered deliveries")
    redrive.add_argument("approval_id")
    grants = sub.add_parser("grants", help="standing grants (docs/grants.md)")
    grants_sub = grants.add_subparsers(dest="grants_command", required=True)
    listing = grants_sub.add_parser(
        "list", help="live standing grants, newest first (with --all, ended ones too)"
    )
    listing.add_argument("--all", action="store_true", help="revoked, expired, used up too")
    listing.add_argument("--agent", help="only this agent's")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")
    revoke = grants_sub.add_parser("revoke", help="revoke a standing grant now")
    revoke.add_argument("grant_id")
    passkeys = sub.add_parser("passkeys", help="people's passkeys for step-up (docs/step-up.md)")
    passkeys_sub = passkeys.add_subparsers(dest="passkeys_command", required=True)
    reset = passkeys_sub.add_parser(
        "reset",
        help="remove every passkey of a person (audited): their next confirmation registers a "
        "new one after signing in",
    )
    reset.add_argument("slack_user_id")
    audit = sub.add_parser("audit", help="the audit trail")
    audit_sub = audit.add_subparsers(dest="audit_command", required=True)
    export = audit_sub.add_parser(
        "export",
        help="every event as JSON Lines: approvals created, attempts, settlements, timers "
        "fired, executions claimed, outcomes, turn verdicts, deliveries; each with its sha256 "
        "and seal, and the seals (to verify offline: docs/audit.md)",
    )
    export.add_argument(
        "--since", required=True, type=_timestamp, help="ISO 8601, e.g. 2026-12-01T00:00Z"
    )
    export.add_argument("--output", "-o", default="-", help="file to write (default: stdout)")
    verify = audit_sub.add_parser(
        "verify",
        help="recompute the audit's hash chain; exit 1 naming the first event or seal that does "
        "not match",
    )
    verify.add_argument(
        "--slack",
        type=_seconds,
        default=audit_chain.DEFAULT_SLACK,
        help="how much older than the seal before its own an event may be and still count as "
        f"written in time, in seconds (default: {audit_chain.DEFAULT_SLACK.total_seconds():g})",
    )
    verify.add_argument(
        "--head",
        type=_head,
        help="SEQ:HASH, a seal's hash kept outside the database (the sealer logs each one): it "
        "must still be in the chain",
    )
    audit_sub.add_parser(
        "seal", help="seal now every audit event not sealed yet (the bot does so every few seconds)"
    )
    sub.add_parser(
        "mcp-permission",
        help="Claude Code's permission-prompt tool: an MCP server on stdio (COUNTERSIGN_URL, "
        "COUNTERSIGN_TOKEN)",
    )
    return parser


def _print_problems(problems: Sequence[str]) -> None:
    print("countersign: configuration problems:", file=sys.stderr)
    for problem in problems:
        print(f"  - {problem}", file=sys.stderr)


async def _slack_problems(cfg: config.Config, env: dict[str, str]) -> list[slack_setup.Problem]:
    """What Slack says of the token and the policy's channels. In try-out mode a stand-in of
    the same shape answers, so that the same path runs (and is tested) either way."""
    async with contextlib.AsyncExitStack() as stack:
        if env.get(TRYOUT) == "1":
            cfg = await _slack_standin(stack, cfg)
        settings = cfg.settings
        session = await stack.enter_async_context(aiohttp.ClientSession())
        token = settings.slack_bot_token.get_secret_value()
        client = slack_client(token, settings.slack_api_url, session)
        app_token = settings.slack_app_token
        found = await slack_setup.problems(
            client,
            cfg.policy,
            settings.slack_api_url,
            app_token.get_secret_value() if app_token is not None else None,
        )
        return found + await _sign_in_problems(settings, session)


async def _sign_in_problems(
    settings: config.Settings, session: aiohttp.ClientSession
) -> list[slack_setup.Problem]:
    """Step-up's sign-in provider, found through its discovery document (docs/step-up.md):
    not answering fails a check, not a start (as Slack not answering)."""
    sign_in = settings.sign_in()
    if sign_in is None:
        return []
    try:
        await oidc.OidcClient(sign_in, session).discovery()
    except oidc.SignInFailed as exc:
        name = "SLACK_API_URL" if sign_in.is_slack else "COUNTERSIGN_OIDC_ISSUER"
        text = f"{name}: the sign-in provider {sign_in.issuer} cannot be used: {exc}"
        return [slack_setup.Problem(text, False)]
    return []


@contextlib.contextmanager
def _database_step() -> Iterator[None]:
    """Around starting, reaching or migrating the database only: what fails there (a DSN that
    does not parse, a server that does not answer) is one line, not a traceback."""
    try:
        yield
    except DATABASE_FAILURES as exc:
        raise DatabaseUnusable(exc) from exc


@contextlib.contextmanager
def _database(settings: config.CommonSettings) -> Iterator[str]:
    """``DATABASE_URL``, or an embedded PostgreSQL under the data directory."""
    if settings.database_url:
        yield settings.database_url
        return
    with contextlib.ExitStack() as stack:
        with _database_step():
            data_dir = (settings.data_dir / "pgdata").resolve()
            dsn = stack.enter_context(embedded_pg.embedded_postgres(data_dir))
        yield dsn


def _on_database(
    args: argparse.Namespace, dsn: str, cfg: config.Config | None, env: dict[str, str]
) -> int:
    if args.command == "migrate":
        applied = asyncio.run(_migrate(dsn))
        print(f"applied migrations: {applied or 'none (up to date)'}")
        return 0
    if args.command == "redrive":
        return asyncio.run(_redrive(dsn, args.approval_id))
    if args.command == "grants":
        if args.grants_command == "revoke":
            return asyncio.run(_revoke_grant(dsn, args.grant_id))
        return asyncio.run(_list_grants(dsn, args.agent, live=not args.all, as_json=args.json))
    if args.command == "passkeys":
        return asyncio.run(_reset_passkeys(dsn, args.slack_user_id))
    if args.command == "audit":
        match args.audit_command:
            case "verify":
                return asyncio.run(_audit_verify(dsn, args.slack, args.head))
            case "seal":
                return asyncio.run(_audit_seal(dsn))
        return _audit_export(dsn, args.since, args.output)
    assert cfg is not None, "run reads the whole configuration"
    asyncio.run(_migrate(dsn))
    return asyncio.run(_serve(cfg, env, dsn))


async def _migrate(dsn: str) -> list[int]:
    with _database_step():
        return await pg_db.migrate(dsn)


async def _serve(cfg: config.Config, env: dict[str, str], dsn: str) -> int:
    """Serve until SIGINT or SIGTERM; everything started is stopped in the reverse order."""
    async with contextlib.AsyncExitStack() as stack:
        tryout = env.get(TRYOUT) == "1"
        standin = None
        if tryout:  # the stand-in and its page, never beside a real workspace
            from bot.sandbox import tryout as sandbox

            cfg, standin = await sandbox.start_standin(stack, cfg)
        with _database_step():
            store = await Repository.connect(dsn)
        stack.push_async_callback(store.close)
        with _database_step():  # it reads the database's clock
            app = await build_app(cfg, store, reload_env=env)
        if standin is not None:
            from bot.sandbox import tryout as sandbox

            sandbox.mount_sandbox(app, standin, cfg)
        await _listen(stack, app, cfg.settings)
        frozen = memory.freeze_startup()
        log.info(
            "countersign serving",
            extra={
                "action": "start",
                "port": cfg.settings.port,
                "policy": cfg.policy.version,
                "frozen_objects": frozen,
            },
        )
        if tryout:
            print(_tryout_lines(cfg), flush=True)
        stack.callback(log.info, "countersign stopping", extra={"action": "stop"})
        await _until_stopped(app)
    return 0


async def _slack_standin(stack: contextlib.AsyncExitStack, cfg: config.Config) -> config.Config:
    """Try-out without a workspace: the Slack Web API stand-in on loopback, and ``cfg`` with
    the stand-in's URL (the one setting try-out mode changes)."""
    from bot.sandbox import tryout

    cfg, _ = await tryout.start_standin(stack, cfg)
    return cfg


def _tryout_lines(cfg: config.Config) -> str:
    """What the start prints in try-out mode: where Slack is, the sandbox page, an agent's
    token and a curl that submits an approval (the first line is the one scripts look for)."""
    from bot.sandbox import page

    settings = cfg.settings
    base = f"http://{settings.host}:{settings.port}"
    lines = [
        f"countersign: try-out mode on {base}: no SLACK_BOT_TOKEN, so Slack is a local "
        f"stand-in at {settings.slack_api_url}; its signing secret was drawn at random for "
        "this start (set HOST to listen elsewhere)",
        f"countersign: sandbox, what Slack would show (click as anyone): {base}{page.PREFIX}",
    ]
    if cfg.agents:
        agent = cfg.agents[0]
        body = json.dumps(
            {
                "request_id": "try-1",
                "session_id": "sandbox",
                "tool": {
                    "name": "send_invoice",
                    "call_id": "call_1",
                    "arguments": {"customer": "ACME", "amount_eur": 1200},
                },
                "requester": {
                    "slack_user_id": page.REQUESTER.id,
                    "email": page.REQUESTER.email,
                    "name": "Rita",
                },
                "summary": "Invoice ACME for the May work",
            },
            separators=(",", ":"),
        )
        lines += [
            f"countersign: agent {agent.name}'s token: {agent.token}",
            "countersign: submit an approval (change request_id for another):",
            f"  curl -sS {base}/v1/approvals -H "
            + shlex.quote(f"Authorization: Bearer {agent.token}")
            + " -H 'Content-Type: application/json' -d "
            + shlex.quote(body),
        ]
    return "\n".join(lines)


async def _listen(
    stack: contextlib.AsyncExitStack, app: web.Application, settings: config.Settings
) -> None:
    """HTTP on ``HOST:PORT``; with ``SLACK_APP_TOKEN``, Slack's events over Socket Mode too."""
    # at SIGTERM, long-polls still open get 5 s, then are cut (agents' clients retry)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=5.0)
    await runner.setup()
    stack.push_async_callback(_stop_serving, runner)
    try:
        await web.TCPSite(runner, settings.host, settings.port).start()
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise PortInUse(settings.host, settings.port) from exc
        raise
    if settings.slack_app_token is not None:
        # Socket Mode: Slack's events come over a websocket, no public URL needed
        from bot import socket_mode

        await socket_mode.connect(stack, app[BOLT], settings.slack_app_token.get_secret_value())


# At SIGTERM a connection just accepted may not have sent its request yet; aiohttp closes such
# idle connections as soon as it stops listening, which cuts that request without an answer.
# They get this long to arrive first (requests in flight get shutdown_timeout to finish): on a
# loaded 2-core machine a client's request came more than 0.5 s after its connection.
ACCEPTED_GRACE = 1.0


async def _stop_serving(runner: web.AppRunner) -> None:
    """Stop listening, let requests on connections already accepted arrive, then finish."""
    for site in list(runner.sites):
        await site.stop()
    await asyncio.sleep(ACCEPTED_GRACE)
    await runner.cleanup()


async def _until_stopped(app: web.Application) -> None:
    """Wait for SIGINT or SIGTERM; meanwhile SIGHUP reloads the policy."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, app[LIVE].reload)
    await stop.wait()


def _timestamp(text: str) -> datetime:
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def _seconds(text: str) -> timedelta:
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < 10**9:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}")
    return timedelta(seconds=seconds)


def _head(text: str) -> tuple[int, str]:
    seq, _, digest = text.partition(":")
    if not (seq.isdigit() and len(digest) == 64 and set(digest) <= set("0123456789abcdef")):
        raise argparse.ArgumentTypeError(
            f"not SEQ:HASH (a seal number and 64 hex digits): {text!r}"
        )
    return int(seq), digest


async def _audit_lines(dsn: str, since: datetime) -> tuple[list[dict[str, Any]], int]:
    """The export's lines in time order: every event (its body, its ``sha256``, the ``seal``
    holding it) and every seal an offline check of those events needs; and the event count."""
    with _database_step():
        store = await Repository.connect(dsn, listen=False)
    try:
        with _database_step():  # an unmigrated schema (no audit_seals yet) is one line too
            held, seals = await store.audit.export(since)
    finally:
        await store.close()
    lines = [
        (event.at, event.body() | {"sha256": event.sha256, "seal": seal.seq if seal else None})
        for event, seal in held
    ]
    # a seal after the events it holds (at its own time, later than theirs as a rule)
    lines += [(seal.sealed_at, seal.line()) for seal in seals]
    lines.sort(key=lambda line: (line[0], line[1]["kind"] == "seal"))
    return [line for _, line in lines], len(held)


async def _audit_verify(dsn: str, slack: timedelta, head: tuple[int, str] | None) -> int:
    with _database_step():
        store = await Repository.connect(dsn, listen=False)
    try:
        with _database_step():
            result = await store.audit.verify(slack=slack, head=head)
    finally:
        await store.close()
    # on stderr, like the export's count: stdout stays for data
    print(result.summary(), file=sys.stderr)
    for problem in result.problems[1:20]:
        print(f"  also: {problem}", file=sys.stderr)
    return 0 if result.ok else 1


async def _audit_seal(dsn: str) -> int:
    with _database_step():
        store = await Repository.connect(dsn, listen=False)
    written: list[tuple[int, int]] = []  # (seq, events) of each seal of the pass
    try:
        # stamped with the database's clock, the one the replicas keep time by
        with _database_step():
            seal = await store.audit.seal(
                await store.database_time(),
                wait=True,
                on_seal=lambda s: written.append((s.seq, s.count)),
            )
    finally:
        await store.close()
    if seal is None:
        print("audit seal: nothing to seal", file=sys.stderr)
    elif len(written) == 1:
        print(
            f"audit seal: seal {seal.seq}, {seal.count} events, hash {seal.hash}", file=sys.stderr
        )
    else:  # a backlog, sealed as several seals of audit_chain.SEAL_EVENTS at most
        events = sum(count for _, count in written)
        print(
            f"audit seal: seals {written[0][0]} to {seal.seq}, {events} events, "
            f"head hash {seal.hash}",
            file=sys.stderr,
        )
    return 0


def _audit_export(dsn: str, since: datetime, output: str) -> int:
    found, count = asyncio.run(_audit_lines(dsn, since))
    # written a line at a time: the export is not held a second time as one string
    if output == "-":
        _write_lines(sys.stdout, found)
        return 0
    try:
        with Path(output).open("w", encoding="utf-8") as out:
            _write_lines(out, found)
    except OSError as exc:
        print(f"audit export: cannot write {output}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(f"{count} events written to {output}", file=sys.stderr)
    return 0


def _write_lines(out: TextIO, lines: list[dict[str, Any]]) -> None:
    for line in lines:
        out.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")


async def _redrive(dsn: str, approval_id: str) -> int:
    with _database_step():
        store = await Repository.connect(dsn, listen=False)
    try:
        # due now by the database's clock, the one the replicas keep time by
        now = await store.database_time()
        count = await store.redrive(approval_id, now, [models.card_update(approval_id)])
    finally:
        await store.close()
    print(f"{count} dead-lettered deliveries of {approval_id} are due again")
    return 0 if count else 1


async def _list_grants(dsn: str, agent: str | None, *, live: bool, as_json: bool) -> int:
    with _database_step():
        store = await Repository.connect(dsn, listen=False)
    try:
        now = await store.database_time()
        found = await store.list_grants(agent=agent, live_at=now if live else None, limit=1000)
    finally:
        await store.close()
    for grant in found:
        if as_json:
            line = {**resource.grant(grant), "state": grant.state(now)}
            print(json.dumps(line, ensure_ascii=False, separators=(",", ":")))
            continue
        scope = f"session {grant.session_id}" if grant.scope == "session" else "any session"
        print(
            f"{grant.grant_id}  {grant.state(now):8}  {grant.agent}  {grant.tool_name}  "
            f"{scope}  {grant.uses}/{grant.max_uses} used  until {grant.expires_at.isoformat()}"
            f"  by {grant.granted_by.name or grant.granted_by.slack_user_id}"
        )
    if not found and not as_json:
        print("no live standing grants" if live else "no standing grants")
    return 0


async def _revoke_grant(dsn: str, grant_id: str) -> int:
    with _database_step():
        store = await Repository.connect(dsn, listen=False)
    try:
        now = await store.database_time()
        revoked = await store.revoke_grant(
            grant_id, "cli", now, lambda on: [models.card_update(on)]
        )
        found = await store.get_grant(grant_id)
    finally:
        await store.close()
    if revoked:
        print(f"{grant_id} revoked: later calls need a decision again")
        return 0
    print(
        f"countersign: {grant_id}: " + ("no such grant" if found is None else "revoked already"),
        file=sys.stderr,
    )
    return 1


async def _reset_passkeys(dsn: str, slack_user_id: str) -> int:
    with _database_step():
        store = await Repository.connect(dsn, listen=False)
    try:
        now = await store.database_time()
        removed = await store.passkeys.reset_passkeys(slack_user_id, "cli", now)
    finally:
        await store.close()
    print(f"{len(removed)} passkeys of {slack_user_id} removed (recorded in the audit)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
