"""The step-up page (docs/step-up.md): where an approver confirms, with a passkey, an approval
that a ``verify: passkey`` rule holds back, at ``/step-up/{token}`` of the bot's own
application.

The link (single use, the clicker's, 5 minutes) comes in the ephemeral answer to their Approve.
Opening it signs the person in with the configured OpenID Connect provider (:mod:`bot.oidc`) —
whoever signs in must be the Slack user who clicked — then shows what they are approving and
asks their passkey (:mod:`bot.passkeys`) to sign a challenge that commits to the approval, the
arguments' hash and the decision. The service (:meth:`ApprovalService.confirm_with_passkey`)
checks the link and the approval again and counts the vote as a click would.

A real web page: the shell is static HTML and one script file, under a Content-Security-Policy
that allows nothing inline and nothing from elsewhere; everything from an agent is set as text
(``textContent``), never parsed as HTML. Cookies are ``HttpOnly``, ``SameSite=Lax`` and
``Secure`` behind https. Every POST must be JSON from the page's own origin carrying the
session's CSRF token; confirmations are limited per session and per link.
"""

from __future__ import annotations

import collections
import hmac
import html
import json
import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from aiohttp import web

from approvals import edits, models, service, step_up
from approvals.passkey_store import PasskeyStore, WebSession
from bot import messages, oidc, passkeys
from bot.config import SignIn

__all__ = ["PREFIX", "StepUpPage"]

log = logging.getLogger(__name__)

PREFIX = "/step-up/"
STATIC = Path(__file__).with_name("step_up_static")
_FILES = {
    "step-up.js": "text/javascript",
    "step-up.css": "text/css",
    "favicon.svg": "image/svg+xml",
}
SESSION_COOKIE = "countersign_step_up"
SIGN_IN_COOKIE = "countersign_sign_in"
SESSION_SECONDS = 600
SIGN_IN_SECONDS = 600
ADD_PASSKEY_WINDOW = timedelta(minutes=5)  # adding a passkey: one used this recently
CONFIRMS_PER_MINUTE = 10  # per session, beside the link's own limit (step_up.MAX_TRIES)
_TOKEN = re.compile(r"[A-Za-z0-9_-]{20,100}")
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",  # the link's token is in the URL
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
}


@dataclass
class StepUpPage:
    approvals: service.ApprovalService
    store: PasskeyStore
    directory: service.ApproverDirectory
    sign_in: SignIn
    provider: oidc.OidcClient
    clock: Callable[[], datetime]
    # a direct message to a person (Slack): told of every passkey registered for them, so that
    # one registered by someone else with their sign-in does not go unnoticed
    tell: Callable[[str, str], Awaitable[None]] | None = None
    _confirms: dict[str, collections.deque[float]] = field(
        default_factory=lambda: collections.defaultdict(collections.deque)
    )

    @property
    def rp(self) -> passkeys.RelyingParty:
        return passkeys.RelyingParty.of(self.sign_in.public_url)

    @property
    def _secure(self) -> bool:
        return self.sign_in.public_url.startswith("https://")

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get(oidc.CALLBACK_PATH, self.signed_in)
        app.router.add_get(PREFIX + "static/{name}", self.static)
        app.router.add_get(PREFIX + "{token}", self.page)
        app.router.add_get(PREFIX + "{token}/facts", self.facts)
        app.router.add_post(PREFIX + "{token}/options", self.options)
        app.router.add_post(PREFIX + "{token}/register", self.register)
        app.router.add_post(PREFIX + "{token}/confirm", self.confirm)

    # -- pages ----------------------------------------------------------------------------

    async def static(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if name not in _FILES:
            raise web.HTTPNotFound(headers=_HEADERS)
        return web.Response(
            body=(STATIC / name).read_bytes(), content_type=_FILES[name], headers=_HEADERS
        )

    async def page(self, request: web.Request) -> web.StreamResponse:
        """The page for a link: sign in first (as the person who clicked), then the shell."""
        token = request.match_info["token"]
        link = await self._link(token)
        why = step_up.link_problem(link, self.clock())
        if why is not None:
            return _message(410, "This confirmation link cannot be used", why)
        assert link is not None
        session = await self._session(request)
        if session is None or session.slack_user_id != link.slack_user_id:
            return await self._start_sign_in(token)
        shell = (STATIC / "step-up.html").read_text("utf-8")
        body = shell.replace("{{csrf}}", html.escape(session.csrf_token, quote=True))
        return web.Response(text=body, content_type="text/html", headers=_HEADERS)

    async def _start_sign_in(self, token: str) -> web.StreamResponse:
        state, nonce = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        try:
            url = await self.provider.authorize_url(state, nonce)
        except oidc.SignInFailed as exc:
            log.warning("sign-in unavailable", extra={"action": "step_up", "error": str(exc)})
            return _message(503, "Signing in is not available", str(exc))
        response = web.Response(status=302, headers={**_HEADERS, "Location": url})
        self._cookie(response, SIGN_IN_COOKIE, f"{state}.{nonce}.{token}", SIGN_IN_SECONDS)
        return response

    async def signed_in(self, request: web.Request) -> web.StreamResponse:
        """The provider's redirect back: the state must be this browser's, the ID token valid,
        and who signed in the Slack user who clicked."""
        state, nonce, token = _parts(request.cookies.get(SIGN_IN_COOKIE, ""))
        given = request.query.get("state", "")
        code = request.query.get("code", "")
        if not state or not hmac.compare_digest(state, given) or not code:
            return _message(400, "Sign-in not recognised", "open the confirmation link again")
        link = await self._link(token)
        why = step_up.link_problem(link, self.clock())
        if why is not None:
            return _message(410, "This confirmation link cannot be used", why)
        assert link is not None
        try:
            identity = await self.provider.identity(code, nonce)
        except oidc.SignInFailed as exc:
            return _message(403, "Sign-in failed", str(exc))
        mismatch = await self._not_the_clicker(identity, link.slack_user_id)
        if mismatch is not None:
            log.warning(
                "step-up sign-in as another person",
                extra={"action": "step_up", "slack_user_id": link.slack_user_id},
            )
            return _message(403, "Signed in as someone else", mismatch)
        now = self.clock()
        session = WebSession(
            session_id=secrets.token_urlsafe(32),
            slack_user_id=link.slack_user_id,
            csrf_token=secrets.token_urlsafe(32),
            created_at=now,
            expires_at=now + timedelta(seconds=SESSION_SECONDS),
        )
        await self.store.add_session(session)
        response = web.Response(status=303, headers={**_HEADERS, "Location": PREFIX + token})
        self._cookie(response, SESSION_COOKIE, session.session_id, SESSION_SECONDS)
        response.del_cookie(SIGN_IN_COOKIE, path="/")
        return response

    async def _not_the_clicker(self, identity: oidc.Identity, clicker: str) -> str | None:
        """Why this sign-in is not the Slack user who clicked, or None when it is: their Slack
        user id (Sign in with Slack), else their verified e-mail against the clicker's Slack
        profile's."""
        facts = await self.directory.approver(clicker, frozenset())
        if facts.lookup_error is not None:
            return f"the clicker's Slack profile could not be checked ({facts.lookup_error})"
        if self.sign_in.is_slack:
            # a Slack user id is unique together with its workspace: both must be the clicker's
            if identity.slack_user_id == clicker and identity.slack_team_id == facts.team_id:
                return None
            who = identity.slack_user_id or identity.subject
            return f"you signed in to Slack as {who}; Approve was clicked by another person"
        if identity.email is None:
            return "the sign-in provider did not give a verified e-mail address"
        if facts.email is None or identity.email != facts.email.lower():
            return (
                f"you signed in as {identity.email}, which is not the e-mail of the Slack user "
                "who clicked Approve"
            )
        return None

    # -- the page's calls -------------------------------------------------------------------

    async def facts(self, request: web.Request) -> web.StreamResponse:
        """What the person is approving, for the page to show (as text)."""
        link, session, refusal = await self._signed_in(request, post=False)
        if refusal is not None:
            return refusal
        assert link is not None
        assert session is not None
        approval = await self.approvals.get(link.approval_id)
        keys = await self.store.passkeys_of(session.slack_user_id)
        return _json(200, _facts(approval, link, session, has_passkey=bool(keys)))

    async def options(self, request: web.Request) -> web.StreamResponse:
        """WebAuthn options: a registration's for a person with no passkey (or one adding
        another, right after using one), else an assertion's whose challenge commits to the
        approval as it is now, the decision and the link."""
        link, session, refusal = await self._signed_in(request, post=True)
        if refusal is not None:
            return refusal
        assert link is not None
        assert session is not None
        approval = await self.approvals.get(link.approval_id)
        why = step_up.why_not(link, session.slack_user_id, approval, self.clock())
        if why is not None:
            return _json(409, {"error": why})
        body = await _body(request)
        keys = await self.store.passkeys_of(session.slack_user_id)
        if not keys or body.get("add") is True:
            if keys and not self._used_passkey_recently(session):
                return _json(403, {"error": "adding a passkey needs one of yours, used first"})
            handle = keys[0].user_handle if keys else _new_handle()
            facts = await self.directory.approver(session.slack_user_id, frozenset())
            name = facts.name or session.slack_user_id
            options, challenge = passkeys.registration_options(
                self.rp, session.slack_user_id, name, handle, keys
            )
            await self.store.swap_challenge(session.session_id, f"{handle}.{challenge.hex()}")
            return _json(200, {"mode": "register", "publicKey": options})
        challenge = step_up.expected_challenge(link, approval)
        return _json(
            200,
            {"mode": "confirm", "publicKey": passkeys.assertion_options(self.rp, challenge, keys)},
        )

    async def register(self, request: web.Request) -> web.StreamResponse:
        link, session, refusal = await self._signed_in(request, post=True)
        if refusal is not None:
            return refusal
        assert link is not None
        assert session is not None
        why = step_up.link_problem(link, self.clock())
        if why is not None:
            return _json(409, {"error": why})
        kept = await self.store.swap_challenge(session.session_id, None)
        if kept is None:
            return _json(409, {"error": "ask for the options first"})
        keys = await self.store.passkeys_of(session.slack_user_id)
        if keys and not self._used_passkey_recently(session):
            return _json(403, {"error": "adding a passkey needs one of yours, used first"})
        handle, challenge = kept.split(".", 1)
        credential = (await _body(request)).get("credential")
        if not isinstance(credential, dict):
            return _json(422, {"error": "credential: expected the browser's answer (an object)"})
        try:
            key = passkeys.registered(
                self.rp,
                credential,
                bytes.fromhex(challenge),
                session.slack_user_id,
                handle,
                self.clock(),
            )
        except step_up.PasskeyFailed as exc:
            return _json(422, {"error": f"the passkey could not be registered: {exc}"})
        if not await self.store.add_passkey(key, first=not keys):
            return _json(409, {"error": "a passkey was registered meanwhile: confirm with it"})
        log.info(
            "passkey registered",
            extra={"action": "step_up", "slack_user_id": session.slack_user_id},
        )
        if self.tell is not None:
            at = key.created_at.strftime("%Y-%m-%d %H:%M UTC")
            text = messages.PASSKEY_REGISTERED.format(at=at, user=session.slack_user_id)
            await self.tell(session.slack_user_id, text)
        return _json(200, {"ok": True, "mode": "confirm"})

    async def confirm(self, request: web.Request) -> web.StreamResponse:
        """The assertion: the service verifies it against the approval as it is now and counts
        the vote as a click would."""
        link, session, refusal = await self._signed_in(request, post=True)
        if refusal is not None:
            return refusal
        assert link is not None
        assert session is not None
        if self._too_many(session.session_id):
            return _json(429, {"error": "too many confirmations: wait a minute"})
        credential = (await _body(request)).get("credential")
        if not isinstance(credential, dict):
            return _json(422, {"error": "credential: expected the browser's answer (an object)"})
        now = self.clock()

        def verify(challenge: bytes) -> Awaitable[models.PasskeyUse]:
            return passkeys.verify_assertion(
                self.rp, self.store, credential, challenge, session.slack_user_id, now
            )

        result = await self.approvals.confirm_with_passkey(
            link.token, slack_user_id=session.slack_user_id, directory=self.directory, verify=verify
        )
        if isinstance(result, service.Settled | service.Voted):
            await self.store.session_used_passkey(session.session_id, now)
        return _json(*_answer(result))

    # -- helpers ----------------------------------------------------------------------------

    async def _link(self, token: str) -> step_up.StepUp | None:
        return await self.store.step_up(token) if _TOKEN.fullmatch(token) else None

    async def _session(self, request: web.Request) -> WebSession | None:
        session_id = request.cookies.get(SESSION_COOKIE, "")
        if not _TOKEN.fullmatch(session_id):
            return None
        return await self.store.session(session_id, self.clock())

    async def _signed_in(
        self, request: web.Request, *, post: bool
    ) -> tuple[step_up.StepUp | None, WebSession | None, web.Response | None]:
        """The link and the session of a call of the page, or the refusal: the session must be
        the link's clicker's; a POST must come from the page's own origin, as JSON, with the
        session's CSRF token."""
        link = await self._link(request.match_info["token"])
        session = await self._session(request)
        if link is None or session is None or session.slack_user_id != link.slack_user_id:
            return None, None, _json(401, {"error": "sign in again: open the link from Slack"})
        if post:
            origin = request.headers.get("Origin")
            if origin is not None and origin != self.rp.origin:
                return None, None, _json(403, {"error": "not from this page"})
            sent = request.headers.get("X-CSRF-Token", "")
            if not hmac.compare_digest(sent.encode(), session.csrf_token.encode()):
                return None, None, _json(403, {"error": "the page's token is missing or stale"})
            if request.content_type != "application/json":
                return None, None, _json(415, {"error": "expected application/json"})
        return link, session, None

    def _used_passkey_recently(self, session: WebSession) -> bool:
        used = session.passkey_at
        return used is not None and self.clock() - used < ADD_PASSKEY_WINDOW

    def _too_many(self, session_id: str) -> bool:
        now = time.monotonic()
        if len(self._confirms) > 10_000:  # sessions long gone: forget whose minute has passed
            for gone in [k for k, v in self._confirms.items() if not v or now - v[-1] > 60]:
                del self._confirms[gone]
        recent = self._confirms[session_id]
        while recent and now - recent[0] > 60:
            recent.popleft()
        recent.append(now)
        return len(recent) > CONFIRMS_PER_MINUTE

    def _cookie(self, response: web.StreamResponse, name: str, value: str, seconds: int) -> None:
        response.set_cookie(
            name,
            value,
            max_age=seconds,
            path="/",
            httponly=True,
            secure=self._secure,
            samesite="Lax",
        )


def _parts(cookie: str) -> tuple[str, str, str]:
    parts = cookie.split(".")
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 else ("", "", "")


def _new_handle() -> str:
    return secrets.token_urlsafe(32)


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _json(status: int, body: dict[str, Any]) -> web.Response:
    return web.Response(
        text=json.dumps(body), status=status, content_type="application/json", headers=_HEADERS
    )


def _message(status: int, title: str, text: str) -> web.Response:
    """A page of text only (every value escaped)."""
    body = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width"><title>{html.escape(title)}</title>'
        f'<link rel="stylesheet" href="{PREFIX}static/step-up.css">'
        f'<link rel="icon" href="{PREFIX}static/favicon.svg"></head>'
        f'<body><main><h1>{html.escape(title)}</h1><p id="message">{html.escape(text)}</p>'
        "</main></body></html>"
    )
    return web.Response(text=body, status=status, content_type="text/html", headers=_HEADERS)


def _facts(
    approval: models.Approval, link: step_up.StepUp, session: WebSession, *, has_passkey: bool
) -> dict[str, Any]:
    requester = approval.requester
    edit = approval.edit
    return {
        "approval_id": approval.approval_id,
        "status": approval.status.value,
        "tool": approval.tool.name,
        # what would run: an edit's arguments where a reviewer edited the call
        "arguments": edit.arguments_jcs if edit is not None else approval.arguments_jcs,
        "arguments_sha256": approval.run_sha256,
        "requester": requester.name or requester.email or requester.slack_user_id or "",
        "agent": approval.agent,
        "summary": approval.summary,
        "decision": link.decision,
        "edit": None
        if edit is None
        else {
            "by": edit.by.name or edit.by.slack_user_id,
            "note": edit.note or "",
            "changed": [edits.dotted(op) for op in edit.patch],
        },
        "link_expires_at": link.expires_at.isoformat(),
        "signed_in_as": session.slack_user_id,
        "has_passkey": has_passkey,
    }


def _answer(result: service.ConfirmResult) -> tuple[int, dict[str, Any]]:
    match result:
        case service.Settled(approval=approval):
            return 200, {"ok": True, "status": approval.status.value, "message": "Approved."}
        case service.Voted(approval=approval):
            needed = approval.required.approvals
            message = f"Your approval counts ({len(approval.decided_by)} of {needed})."
            return 200, {"ok": True, "status": approval.status.value, "message": message}
        case service.PasskeyRefused(why=why):
            return 409, {"ok": False, "error": why}
        case service.Refused(verdict=verdict):
            return 403, {"ok": False, "error": verdict.reason}
        case service.Duplicate():
            return 409, {"ok": False, "error": "your approval was counted already"}
        case service.Stale(approval=approval) | service.Expired(approval=approval):
            return 409, {"ok": False, "error": f"the approval is {approval.status.value}"}
        case service.Outdated():
            return 409, {"ok": False, "error": "the arguments were edited: see the card"}
        case service.PasskeyAsked():
            return 409, {"ok": False, "error": "confirm again"}
    return 500, {"ok": False, "error": "unexpected"}
