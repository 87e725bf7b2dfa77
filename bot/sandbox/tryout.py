"""Try-out mode's wiring, shared by ``countersign run`` without a workspace and ``make demo``:
the Slack stand-in with the policy's people, and the sandbox page on the bot's application."""

from __future__ import annotations

import contextlib
import dataclasses

from aiohttp import web

from bot import config
from bot.app import LIVE
from bot.sandbox import page
from bot.sandbox.standin import SlackStandIn

__all__ = ["mount_sandbox", "start_standin"]


async def start_standin(
    stack: contextlib.AsyncExitStack, cfg: config.Config
) -> tuple[config.Config, SlackStandIn]:
    """The Slack Web API stand-in on loopback (stopped when ``stack`` unwinds), and ``cfg``
    with its URL (the one setting try-out mode changes). Its workspace: the people the policy
    names, a member of each of its user groups, a requester and an outsider
    (:func:`bot.sandbox.page.cast`), so that clicks can settle and be refused."""
    people = page.cast(cfg.policy)
    standin = SlackStandIn(
        token=cfg.settings.slack_bot_token.get_secret_value(),
        users=people.users,
        usergroups=people.usergroups,
        channels=cfg.policy.channels,
    )
    url = await standin.start()
    stack.push_async_callback(standin.stop)
    settings = cfg.settings.model_copy(update={"slack_api_url": url})
    return dataclasses.replace(cfg, settings=settings), standin


def mount_sandbox(app: web.Application, standin: SlackStandIn, cfg: config.Config) -> page.Sandbox:
    """The sandbox page on the bot's own application, before it starts serving (try-out only:
    never beside a real workspace)."""
    sandbox = page.Sandbox(
        standin=standin,
        signing_secret=cfg.settings.slack_signing_secret.get_secret_value(),
        policy=app[LIVE].policy,
        notes=page.cast(cfg.policy).notes,
    )
    page.mount(app, sandbox)
    return sandbox
