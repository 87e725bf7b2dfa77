"""The policy, reloadable without a restart: on SIGHUP and when the file changes.

An invalid new file is refused with a logged error and the old policy stays in force. Pending
approvals keep the rule, role and quorum they were created under (stored on the approval);
who holds a role is read from the current policy at click time. Settings from the environment
(tokens, URLs, ports) are read once at start: changing them needs a restart.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from approvals import errors, policy
from bot import config

__all__ = ["LiveConfig"]

log = logging.getLogger(__name__)


class LiveConfig:
    def __init__(self, initial: config.Config, env: Mapping[str, str] | None = None) -> None:
        self._config = initial
        self._env = dict(env) if env is not None else None
        self._mtime = self._stat()

    def policy(self) -> policy.Policy:
        return self._config.policy

    def agents(self) -> tuple[config.AgentCredentials, ...]:
        return self._config.agents

    def secrets(self) -> dict[str, str | None]:
        return {a.name: a.callback_secret for a in self._config.agents}

    def _stat(self) -> float | None:
        try:
            return self._config.settings.config_path.stat().st_mtime
        except OSError:
            return None

    def reload(self) -> bool:
        """Load the file again; keep the old policy (and say why) if the new one is invalid."""
        if self._env is None:
            return False
        self._mtime = self._stat()
        try:
            new = config.load(self._env)
        except errors.PolicyError as exc:
            log.error(
                "policy reload refused; the previous policy stays in force",
                extra={"action": "reload", "problems": exc.problems},
            )
            return False
        old = self._config.policy.version
        self._config = config.Config(
            settings=self._config.settings, policy=new.policy, agents=new.agents
        )
        log.info(
            "policy reloaded",
            extra={"action": "reload", "from": old, "to": new.policy.version},
        )
        return True

    async def watch(self, interval: float = 2.0) -> None:
        """Reload whenever the file's modification time changes (until cancelled)."""
        while True:
            await asyncio.sleep(interval)
            if self._env is not None and self._stat() != self._mtime:
                self.reload()
