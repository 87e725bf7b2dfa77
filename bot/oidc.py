"""Signing in to the step-up page (docs/step-up.md): OpenID Connect's authorization code flow
with the configured issuer — Sign in with Slack by default, or any other (Okta, Entra ID,
Google) — found through discovery.

The ID token is checked with joserfc: its signature against the issuer's published keys (a key
id not among them fetches the keys again, once), then its claims: ``iss`` the issuer, ``aud``
our client id, ``exp`` and ``iat`` present and current, ``nonce`` the one this sign-in sent.
Who signed in is then matched to the Slack user who clicked: by Slack user id for Sign in with
Slack, by verified e-mail (``email_verified``) for another issuer. Anything missing or
malformed is a :class:`SignInFailed`, never a guess.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import aiohttp
from joserfc import jwt
from joserfc.errors import InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet
from joserfc.jwt import JWTClaimsRegistry

from bot.config import SignIn, url_problem

__all__ = ["SLACK_TEAM_CLAIM", "SLACK_USER_CLAIM", "Identity", "OidcClient", "SignInFailed"]

log = logging.getLogger(__name__)

SLACK_USER_CLAIM = "https://slack.com/user_id"
SLACK_TEAM_CLAIM = "https://slack.com/team_id"
CALLBACK_PATH = "/step-up/signed-in"
SCOPES = "openid email profile"
ALGORITHMS = ["RS256", "ES256"]
DISCOVERY_TTL = 3600.0
KEYS_AGAIN_AFTER = 60.0
TIMEOUT = aiohttp.ClientTimeout(total=10)


class SignInFailed(Exception):
    """The sign-in did not prove who this is; the message says why (shown to the person)."""


@dataclass(frozen=True)
class Identity:
    """Who signed in, as the ID token says."""

    subject: str
    email: str | None  # only when the issuer says it is verified
    slack_user_id: str | None  # Sign in with Slack only
    slack_team_id: str | None


@dataclass(frozen=True)
class _Discovered:
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str


class OidcClient:
    """One issuer, one client: discovery, the authorization URL and the code's exchange."""

    def __init__(self, sign_in: SignIn, session: aiohttp.ClientSession) -> None:
        self._sign_in = sign_in
        self._session = session
        self._discovered: tuple[float, _Discovered] | None = None
        self._keys: KeySet | None = None
        self._keys_read = 0.0
        self._lock = asyncio.Lock()

    @property
    def redirect_uri(self) -> str:
        return self._sign_in.public_url + CALLBACK_PATH

    async def _get_json(self, url: str) -> dict[str, Any]:
        try:
            async with self._session.get(url, timeout=TIMEOUT) as response:
                if response.status != 200:
                    raise SignInFailed(f"{url} answered HTTP {response.status}")
                body = await response.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise SignInFailed(f"{url} could not be read ({type(exc).__name__})") from None
        if not isinstance(body, dict):
            raise SignInFailed(f"{url} did not answer a JSON object")
        return body

    async def discovery(self) -> _Discovered:
        """The issuer's endpoints (``/.well-known/openid-configuration``), kept an hour."""
        async with self._lock:
            now = time.monotonic()
            if self._discovered is not None and now - self._discovered[0] < DISCOVERY_TTL:
                return self._discovered[1]
            issuer = self._sign_in.issuer
            document = await self._get_json(issuer + "/.well-known/openid-configuration")
            if document.get("issuer") != issuer:
                raise SignInFailed(f"the discovery document names another issuer than {issuer}")
            endpoints = {}
            for key in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
                value = document.get(key)
                # the client secret and the ID token travel there: https, or this machine
                if not isinstance(value, str) or url_problem(value) is not None:
                    raise SignInFailed(f"the discovery document has no https {key}")
                endpoints[key] = value
            found = _Discovered(**endpoints)
            self._discovered = (now, found)
            return found

    async def authorize_url(self, state: str, nonce: str) -> str:
        endpoints = await self.discovery()
        query = urlencode(
            {
                "response_type": "code",
                "client_id": self._sign_in.client_id,
                "redirect_uri": self.redirect_uri,
                "scope": SCOPES,
                "state": state,
                "nonce": nonce,
            }
        )
        return f"{endpoints.authorization_endpoint}?{query}"

    async def identity(self, code: str, nonce: str) -> Identity:
        """Exchange ``code`` for tokens and check the ID token (signature, claims, nonce)."""
        endpoints = await self.discovery()
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": self.redirect_uri,
            "client_id": self._sign_in.client_id,
            "client_secret": self._sign_in.client_secret,
        }
        try:
            async with self._session.post(
                endpoints.token_endpoint, data=form, timeout=TIMEOUT
            ) as response:
                body = await response.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise SignInFailed(
                f"the token endpoint could not be read ({type(exc).__name__})"
            ) from None
        id_token = body.get("id_token") if isinstance(body, dict) else None
        if not isinstance(id_token, str):
            raise SignInFailed("the sign-in provider gave no ID token")
        claims = await self._verified_claims(id_token, endpoints, nonce)
        email = claims.get("email")
        verified = claims.get("email_verified") is True
        user = claims.get(SLACK_USER_CLAIM)
        team = claims.get(SLACK_TEAM_CLAIM)
        return Identity(
            subject=str(claims["sub"]),
            email=email.lower() if isinstance(email, str) and verified else None,
            slack_user_id=user if self._sign_in.is_slack and isinstance(user, str) else None,
            slack_team_id=team if self._sign_in.is_slack and isinstance(team, str) else None,
        )

    async def _keyset(self, endpoints: _Discovered, *, again: bool) -> KeySet:
        """The issuer's keys: read once, and again (at most once a minute) for a key id not
        among them (the issuer rotated its keys)."""
        now = time.monotonic()
        if self._keys is None or (again and now - self._keys_read > KEYS_AGAIN_AFTER):
            published = await self._get_json(endpoints.jwks_uri)
            self._keys = KeySet.import_key_set(published)  # type: ignore[arg-type]  # a JWKS
            self._keys_read = now
        return self._keys

    async def _verified_claims(
        self, id_token: str, endpoints: _Discovered, nonce: str
    ) -> dict[str, Any]:
        try:
            keys = await self._keyset(endpoints, again=False)
            token = jwt.decode(id_token, keys, algorithms=ALGORITHMS)
        except InvalidKeyIdError:
            try:
                keys = await self._keyset(endpoints, again=True)
                token = jwt.decode(id_token, keys, algorithms=ALGORITHMS)
            except JoseError as exc:
                raise SignInFailed(
                    f"the ID token's signature does not verify ({exc.error})"
                ) from None
        except JoseError as exc:
            raise SignInFailed(f"the ID token's signature does not verify ({exc.error})") from None
        registry = JWTClaimsRegistry(
            leeway=60,
            iss={"essential": True, "value": self._sign_in.issuer},
            aud={"essential": True, "value": self._sign_in.client_id},
            exp={"essential": True},
            iat={"essential": True},
            sub={"essential": True},
            nonce={"essential": True, "value": nonce},
        )
        try:
            registry.validate(token.claims)
        except JoseError as exc:
            raise SignInFailed(f"the ID token is not for this sign-in ({exc.error})") from None
        audience = token.claims.get("aud")
        several = isinstance(audience, list) and len(audience) > 1
        # several audiences: OpenID Connect says the authorized party must be us
        if several and token.claims.get("azp") != self._sign_in.client_id:
            raise SignInFailed("the ID token was issued to another party (azp)")
        return dict(token.claims)
