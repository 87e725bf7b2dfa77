"""Sign in with Slack, as the Slack stand-in answers it: an OpenID Connect provider on the
stand-in's own address (discovery, authorize, the token endpoint, the keys), so that step-up's
sign-in (bot/oidc.py) runs in try-out mode and in tests exactly as against Slack.

Its ID tokens are real JWTs, signed RS256 with a key made at start (joserfc), with Slack's claims
(``https://slack.com/user_id``, ``https://slack.com/team_id``, ``email``, ``email_verified``,
``name``). Who signs in is :attr:`SignInStandIn.signed_in_as` — the person the browser is
"logged in to Slack" as; a test changes it to sign in as someone else, or changes the claims
(:attr:`SignInStandIn.claims`) to try a forged or unverified e-mail.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from aiohttp import web
from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey

__all__ = ["CLIENT_ID", "CLIENT_SECRET", "SignInStandIn"]

CLIENT_ID = "standin.client"
CLIENT_SECRET = "standin-client-secret"  # noqa: S105 - the stand-in's own, not a secret
_CODE_SECONDS = 60


@dataclass
class _Grant:
    user: str
    nonce: str
    client_id: str
    redirect_uri: str
    at: float


@dataclass
class SignInStandIn:
    """The provider. ``issuer`` is the stand-in's origin (``http://127.0.0.1:PORT``);
    ``profile(user_id)`` gives a user's e-mail and name (None: unknown), ``team_id`` theirs."""

    profile: Callable[[str], tuple[str | None, str] | None]
    team_id: Callable[[str], str]
    issuer: str = ""
    signed_in_as: str | None = None
    claims: dict[str, Any] = field(default_factory=dict)  # laid over the ID token's claims
    client_id: str = CLIENT_ID
    client_secret: str = CLIENT_SECRET
    _key: RSAKey = field(
        default_factory=lambda: RSAKey.generate_key(2048, parameters={"use": "sig"}, auto_kid=True)
    )
    _codes: dict[str, _Grant] = field(default_factory=dict)

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/.well-known/openid-configuration", self._discovery)
        app.router.add_get("/openid/connect/authorize", self._authorize)
        app.router.add_get("/openid/connect/keys", self._keys)
        app.router.add_post("/api/openid.connect.token", self._token)

    async def _discovery(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "issuer": self.issuer,
                "authorization_endpoint": f"{self.issuer}/openid/connect/authorize",
                "token_endpoint": f"{self.issuer}/api/openid.connect.token",
                "userinfo_endpoint": f"{self.issuer}/api/openid.connect.userInfo",
                "jwks_uri": f"{self.issuer}/openid/connect/keys",
                "scopes_supported": ["openid", "profile", "email"],
                "response_types_supported": ["code"],
                "response_modes_supported": ["query"],
                "id_token_signing_alg_values_supported": ["RS256"],
                "token_endpoint_auth_methods_supported": [
                    "client_secret_post",
                    "client_secret_basic",
                ],
            }
        )

    async def _keys(self, request: web.Request) -> web.Response:
        return web.json_response(KeySet([self._key]).as_dict())

    async def _authorize(self, request: web.Request) -> web.Response:
        query = request.query
        if query.get("response_type") != "code" or "openid" not in query.get("scope", "").split():
            return web.Response(status=400, text="invalid_request")
        if query.get("client_id") != self.client_id:
            return web.Response(status=400, text="invalid_client_id")
        redirect_uri = query.get("redirect_uri", "")
        if not redirect_uri.startswith(("http://", "https://")):
            return web.Response(status=400, text="bad_redirect_uri")
        if self.signed_in_as is None:
            return web.Response(status=403, text="nobody is signed in to the Slack stand-in")
        code = secrets.token_urlsafe(24)
        self._codes[code] = _Grant(
            user=self.signed_in_as,
            nonce=query.get("nonce", ""),
            client_id=self.client_id,
            redirect_uri=redirect_uri,
            at=time.monotonic(),
        )
        back = urlencode({"code": code, "state": query.get("state", "")})
        return web.Response(status=302, headers={"Location": f"{redirect_uri}?{back}"})

    async def _token(self, request: web.Request) -> web.Response:
        form = await request.post()
        grant = self._codes.pop(str(form.get("code", "")), None)  # a code is used once
        if (
            grant is None
            or time.monotonic() - grant.at > _CODE_SECONDS
            or form.get("client_id") != grant.client_id
            or form.get("client_secret") != self.client_secret
            or form.get("redirect_uri") != grant.redirect_uri
        ):
            return web.json_response({"ok": False, "error": "invalid_code"})
        known = self.profile(grant.user)
        email, name = known if known is not None else (None, grant.user)
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "sub": grant.user,
            "aud": grant.client_id,
            "exp": now + 300,
            "iat": now,
            "auth_time": now,
            "nonce": grant.nonce,
            "https://slack.com/user_id": grant.user,
            "https://slack.com/team_id": self.team_id(grant.user),
            "name": name,
        }
        if email is not None:
            claims.update(email=email, email_verified=True)
        claims.update(self.claims)
        id_token = jwt.encode({"alg": "RS256", "kid": self._key.kid}, claims, self._key)
        return web.json_response(
            {
                "ok": True,
                "access_token": f"xoxp-standin-{secrets.token_hex(8)}",
                "token_type": "Bearer",
                "id_token": id_token,
            }
        )
