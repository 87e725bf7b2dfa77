"""The configuration in force: the policy (reloaded by :class:`approvals.policy.PolicySource`
on SIGHUP and when the file changes) with the agents' credentials read beside it.

An agent the new file names must have its token set, or the whole file is refused and the old
policy stays. Settings from the environment (tokens, URLs, ports) are read once at start:
changing them needs a restart.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from approvals import policy
from bot import config

__all__ = ["LiveConfig"]


class LiveConfig:
    def __init__(self, initial: config.Config, env: Mapping[str, str] | None = None) -> None:
        # without the environment the config came from, there is nothing to reload it with
        read = None if env is None else partial(config.reread, initial.settings, dict(env))
        self._source = policy.PolicySource(initial, initial.settings.config_path, read)

    def policy(self) -> policy.Policy:
        return self._source()

    def agents(self) -> tuple[config.AgentCredentials, ...]:
        return self._source.current.agents

    def secrets(self) -> dict[str, str | None]:
        return {a.name: a.callback_secret for a in self._source.current.agents}

    def reload(self) -> bool:
        """Load the file again; keep the old policy (and say why) if the new one is invalid."""
        return self._source.reload()

    async def watch(self, interval: float = 2.0) -> None:
        """Reload whenever the file's modification time changes (until cancelled)."""
        await self._source.watch(interval)
