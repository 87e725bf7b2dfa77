"""Passkeys for step-up (docs/step-up.md): WebAuthn registration and assertions, through
py_webauthn — no cryptography of our own.

The relying party is the bot's public URL: its origin is the only one an assertion may come
from, its host the RP id. User verification is required both when a passkey is registered and
when it confirms (a PIN or a biometric, not merely a touch). An assertion is accepted only for a
passkey registered to the very person signed in, with the challenge given, a valid signature and
a sign counter that moves forward (a counter that goes back, or stays above zero, is a cloned
authenticator: refused); the counter is then moved with a compare-and-set, so two assertions
can never both take one value.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import webauthn
from webauthn.helpers import bytes_to_base64url, options_to_json
from webauthn.helpers.exceptions import WebAuthnException
from webauthn.helpers.structs import (
    AuthenticatorSelectionCriteria,
    PublicKeyCredentialDescriptor,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

from approvals import models
from approvals.passkey_store import Passkey, PasskeyStore
from approvals.step_up import PasskeyFailed

__all__ = ["RelyingParty", "assertion_options", "registration_options", "verify_assertion"]

RP_NAME = "Countersign"
TIMEOUT_MS = 120_000


@dataclass(frozen=True)
class RelyingParty:
    origin: str  # https://countersign.example.com[:port]
    rp_id: str  # countersign.example.com

    @classmethod
    def of(cls, public_url: str) -> RelyingParty:
        """From COUNTERSIGN_PUBLIC_URL: its origin as a browser writes it (no default port, a
        lowercase host), and its host as the RP id."""
        url = urlsplit(public_url)
        host = (url.hostname or "").lower()
        default = {"https": 443, "http": 80}.get(url.scheme)
        shown = f"[{host}]" if ":" in host else host
        port = "" if url.port in (None, default) else f":{url.port}"
        return cls(origin=f"{url.scheme}://{shown}{port}", rp_id=host)


@contextmanager
def _refused_as_passkey_failed() -> Iterator[None]:
    """py_webauthn's refusals (all ``WebAuthnException``, malformed JSON included) as ours."""
    try:
        yield
    except WebAuthnException as exc:
        raise PasskeyFailed(str(exc) or type(exc).__name__) from None


def _descriptors(keys: list[Passkey]) -> list[PublicKeyCredentialDescriptor]:
    return [PublicKeyCredentialDescriptor(id=_b64(k.credential_id)) for k in keys]


def _b64(text: str) -> bytes:
    return webauthn.base64url_to_bytes(text)


def registration_options(
    rp: RelyingParty, slack_user_id: str, name: str, user_handle: str, existing: list[Passkey]
) -> tuple[dict[str, Any], bytes]:
    """What the browser's ``navigator.credentials.create`` takes (WebAuthn's JSON form), and
    its challenge (kept by the server until the answer comes)."""
    options = webauthn.generate_registration_options(
        rp_id=rp.rp_id,
        rp_name=RP_NAME,
        user_id=_b64(user_handle),
        user_name=slack_user_id,
        user_display_name=name,
        challenge=secrets.token_bytes(32),
        timeout=TIMEOUT_MS,
        authenticator_selection=AuthenticatorSelectionCriteria(
            resident_key=ResidentKeyRequirement.PREFERRED,
            user_verification=UserVerificationRequirement.REQUIRED,
        ),
        exclude_credentials=_descriptors(existing),
    )
    return json.loads(options_to_json(options)), options.challenge


def registered(
    rp: RelyingParty,
    credential: Mapping[str, Any],
    challenge: bytes,
    slack_user_id: str,
    user_handle: str,
    now: datetime,
) -> Passkey:
    """The passkey the browser created, checked (origin, RP id, challenge, user verified)."""
    with _refused_as_passkey_failed():
        verified = webauthn.verify_registration_response(
            credential=dict(credential),
            expected_challenge=challenge,
            expected_rp_id=rp.rp_id,
            expected_origin=rp.origin,
            require_user_verification=True,
        )
    return Passkey(
        credential_id=bytes_to_base64url(verified.credential_id),
        slack_user_id=slack_user_id,
        user_handle=user_handle,
        public_key=verified.credential_public_key,
        sign_count=verified.sign_count,
        created_at=now,
    )


def assertion_options(rp: RelyingParty, challenge: bytes, keys: list[Passkey]) -> dict[str, Any]:
    """What ``navigator.credentials.get`` takes: this person's passkeys, user verification
    required, and the challenge that commits to the call (:func:`approvals.step_up.challenge`).
    """
    options = webauthn.generate_authentication_options(
        rp_id=rp.rp_id,
        challenge=challenge,
        timeout=TIMEOUT_MS,
        allow_credentials=_descriptors(keys),
        user_verification=UserVerificationRequirement.REQUIRED,
    )
    loaded: dict[str, Any] = json.loads(options_to_json(options))
    return loaded


async def verify_assertion(
    rp: RelyingParty,
    store: PasskeyStore,
    credential: Mapping[str, Any],
    challenge: bytes,
    slack_user_id: str,
    now: datetime,
) -> models.PasskeyUse:
    """The passkey ``credential`` (the browser's JSON) was used by ``slack_user_id`` to sign
    ``challenge``; raises PasskeyFailed saying why not."""
    credential_id = credential.get("id")
    if not isinstance(credential_id, str) or not credential_id:
        raise PasskeyFailed("the answer names no passkey")
    key = await store.passkey(credential_id)
    if key is None or key.slack_user_id != slack_user_id:
        raise PasskeyFailed("this passkey is not registered to you")
    with _refused_as_passkey_failed():
        verified = webauthn.verify_authentication_response(
            credential=dict(credential),
            expected_challenge=challenge,
            expected_rp_id=rp.rp_id,
            expected_origin=rp.origin,
            credential_public_key=key.public_key,
            credential_current_sign_count=key.sign_count,
            require_user_verification=True,
        )
    if not await store.use_passkey(key, verified.new_sign_count, now):
        raise PasskeyFailed("the passkey was used by another confirmation at the same time")
    return models.PasskeyUse(credential_id=credential_id, at=now)
