"""Moved to :mod:`bot.sandbox.standin` (kept here for one session's work in flight)."""

from bot.sandbox.standin import *  # noqa: F403
from bot.sandbox.standin import DEFAULT_SCOPES, SlackChannel, SlackStandIn, SlackUser

__all__ = ["DEFAULT_SCOPES", "SlackChannel", "SlackStandIn", "SlackUser"]
