"""Step-up in the database (migration 0027): confirmation links, people's passkeys and the
confirmation page's signed-in sessions.

:class:`PasskeyStore` runs the step-up queries of ``sql/queries.sql`` through the same
:class:`~approvals.db.Database` as the :class:`~approvals.repository.Repository`, which builds it
over its own (``repository.passkeys``), as it builds the audit's. Each write that must happen
once is a compare-and-set: a link is used once (``use_step_up``), a passkey's sign counter moves
from the value read (``use_passkey``); registering and resetting passkeys write their audit event
in the same statement.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from approvals import db, models, step_up

__all__ = ["Passkey", "PasskeyStore", "WebSession"]


class Passkey(models.Frozen):
    """A registered WebAuthn credential of one person."""

    credential_id: str  # base64url
    slack_user_id: str
    user_handle: str  # base64url, the same for all of one person's passkeys
    public_key: bytes  # COSE
    sign_count: int
    created_at: datetime
    last_used_at: datetime | None = None


class WebSession(models.Frozen):
    """A browser signed in to the confirmation page as ``slack_user_id``."""

    session_id: str
    slack_user_id: str
    csrf_token: str
    created_at: datetime
    expires_at: datetime
    passkey_at: datetime | None = None  # when this session last confirmed with a passkey
    reg_challenge: str | None = None  # hex: a passkey registration's, until its answer


class PasskeyStore:
    def __init__(self, database: db.Database) -> None:
        self._db = database

    # -- confirmation links -------------------------------------------------------------

    async def add_step_up(self, link: step_up.StepUp) -> None:
        await self._db.execute(
            "insert_step_up",
            link.token,
            link.approval_id,
            link.slack_user_id,
            link.decision,
            link.arguments_sha256,
            link.nonce,
            link.created_at,
            link.expires_at,
        )

    async def step_up(self, token: str) -> step_up.StepUp | None:
        row = await self._db.fetchrow("get_step_up", token)
        return None if row is None else step_up.StepUp.model_validate(_columns(row, _LINK))

    async def count_try(self, token: str) -> None:
        """One failed confirmation with this link (:data:`step_up.MAX_TRIES` spend it)."""
        await self._db.execute("count_step_up_try", token)

    async def use_step_up(self, token: str, now: datetime) -> bool:
        """Take the link: True for the one confirmation that does, while it is valid."""
        used = await self._db.fetchval("use_step_up", token, now, step_up.MAX_TRIES)
        return used is not None

    # -- passkeys ---------------------------------------------------------------------

    async def passkeys_of(self, slack_user_id: str) -> list[Passkey]:
        return [_passkey(r) for r in await self._db.fetch("passkeys_of", slack_user_id)]

    async def passkey(self, credential_id: str) -> Passkey | None:
        row = await self._db.fetchrow("get_passkey", credential_id)
        return None if row is None else _passkey(row)

    async def add_passkey(self, key: Passkey, *, first: bool) -> bool:
        """Register ``key`` (audited); False when its credential id is registered already, or,
        for a ``first`` passkey, when its person has one by now (two first registrations at
        once: one wins; the person's lock serialises them)."""
        async with self._db.transaction() as conn:
            await conn.execute("lock_passkeys_of", key.slack_user_id)
            if first and await conn.fetchval("has_passkey", key.slack_user_id):
                return False
            added = await conn.fetchval(
                "insert_passkey",
                key.credential_id,
                key.slack_user_id,
                key.user_handle,
                key.public_key,
                key.sign_count,
                key.created_at,
            )
        return added is not None

    async def use_passkey(self, key: Passkey, new_count: int, at: datetime) -> bool:
        """Move ``key``'s sign counter from the value read to ``new_count``: False when another
        assertion moved it meanwhile (a cloned authenticator, or a replay racing this one)."""
        moved = await self._db.fetchval(
            "use_passkey", key.credential_id, key.sign_count, new_count, at
        )
        return moved is not None

    async def reset_passkeys(self, slack_user_id: str, by: str, at: datetime) -> list[str]:
        """Remove every passkey of ``slack_user_id`` (audited, naming ``by``); their ids."""
        removed: Any = await self._db.fetchval("reset_passkeys", slack_user_id, by, at)
        return list(removed or [])

    # -- the confirmation page's sessions -------------------------------------------------

    async def add_session(self, session: WebSession) -> None:
        await self._db.execute(
            "insert_web_session",
            session.session_id,
            session.slack_user_id,
            session.csrf_token,
            session.created_at,
            session.expires_at,
        )

    async def session(self, session_id: str, now: datetime) -> WebSession | None:
        row = await self._db.fetchrow("get_web_session", session_id, now)
        return None if row is None else WebSession.model_validate(_columns(row, _SESSION))

    async def session_used_passkey(self, session_id: str, at: datetime) -> None:
        await self._db.execute("web_session_used_passkey", session_id, at)

    async def swap_challenge(self, session_id: str, challenge: str | None) -> str | None:
        """Keep ``challenge`` (hex) for the session's registration; the one kept before."""
        previous: str | None = await self._db.fetchval(
            "web_session_challenge", session_id, challenge
        )
        return previous


_LINK = tuple(step_up.StepUp.model_fields)
_SESSION = tuple(WebSession.model_fields)
_KEY = tuple(Passkey.model_fields)


def _columns(row: db.Row, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: row[name] for name in names}


def _passkey(row: db.Row) -> Passkey:
    return Passkey.model_validate({**_columns(row, _KEY), "public_key": bytes(row["public_key"])})
