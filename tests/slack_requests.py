"""Signed HTTP requests shaped like the ones Slack sends to an app.

Slack signs every request to the app's Request URL ("Verifying requests from
Slack"): ``X-Slack-Signature`` is ``v0=`` plus the hex HMAC-SHA256, keyed with
the signing secret, of ``v0:{timestamp}:{raw body}``. Interactive payloads
arrive form-encoded as a single ``payload`` field holding JSON.

The builders here produce byte-for-byte what the app's HTTP endpoint would
receive, so tests drive the real signature check and payload parsing instead
of calling handlers directly. Field sets follow Slack's block_actions and
view_submission payload references, trimmed to what a bot might read.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

__all__ = ["SignedRequest", "block_actions", "raw", "sign", "view_submission"]

FORM_CONTENT_TYPE = "application/x-www-form-urlencoded"

# Slack still sends the deprecated verification token in every payload. Apps
# must ignore it in favour of the signature; a fixed fake value lets a test
# notice if something starts trusting it.
LEGACY_VERIFICATION_TOKEN = "legacy-verification-token-not-for-auth"

_TEAM_DOMAIN = "standin"
_BOT_USER_ID = "U0BOT"
_BOT_ID = "B0BOT"


@dataclass(frozen=True)
class SignedRequest:
    """A request body and the headers Slack would send with it."""

    body: str
    headers: dict[str, str]


def sign(
    body: str,
    signing_secret: str,
    *,
    timestamp: int | None = None,
    content_type: str = FORM_CONTENT_TYPE,
) -> dict[str, str]:
    """Return Slack's signature headers (and Content-Type) for ``body``.

    ``timestamp`` defaults to now; pass an old one to test replay rejection
    (Slack's guidance is to refuse anything more than five minutes off).
    """
    ts = int(time.time()) if timestamp is None else timestamp
    base = f"v0:{ts}:{body}".encode()
    digest = hmac.new(signing_secret.encode(), base, hashlib.sha256).hexdigest()
    return {
        "Content-Type": content_type,
        "X-Slack-Request-Timestamp": str(ts),
        "X-Slack-Signature": f"v0={digest}",
    }


def raw(
    body: str,
    *,
    signing_secret: str,
    content_type: str = FORM_CONTENT_TYPE,
    timestamp: int | None = None,
) -> SignedRequest:
    """Sign an arbitrary body, for tests of malformed or unexpected payloads."""
    return SignedRequest(
        body=body,
        headers=sign(body, signing_secret, timestamp=timestamp, content_type=content_type),
    )


def block_actions(
    *,
    signing_secret: str,
    user_id: str,
    action_id: str,
    value: str,
    channel_id: str = "C0REVIEWS",
    message_ts: str = "1700000000.000100",
    user_name: str = "someone",
    team_id: str = "T0TEAM",
    api_app_id: str = "A0COUNTERSIGN",
    block_id: str = "countersign_decision",
    timestamp: int | None = None,
    message: dict[str, Any] | None = None,
    trigger_id: str | None = None,
    response_url: str | None = None,
) -> SignedRequest:
    """Build the request Slack sends when ``user_id`` clicks a button on a message.

    ``message`` is the message the button sits on, as Slack echoes it back;
    by default a minimal bot message with ``message_ts``. The default
    ``message_ts`` is the ts of the first message a fresh ``SlackStandIn``
    posts. ``response_url`` defaults to a hooks.slack.com address, which
    tests cannot reach (no network); pass one if the code under test uses it.
    """
    ts = int(time.time()) if timestamp is None else timestamp
    payload: dict[str, Any] = {
        "type": "block_actions",
        "user": _user(user_id, user_name, team_id),
        "api_app_id": api_app_id,
        "token": LEGACY_VERIFICATION_TOKEN,
        "container": {
            "type": "message",
            "message_ts": message_ts,
            "channel_id": channel_id,
            "is_ephemeral": False,
        },
        "trigger_id": trigger_id or _trigger_id(ts),
        "team": {"id": team_id, "domain": _TEAM_DOMAIN},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": channel_id, "name": channel_id.lower()},
        "message": message if message is not None else _bot_message(message_ts, team_id),
        "state": {"values": {}},
        "response_url": response_url
        or f"https://hooks.slack.com/actions/{team_id}/{ts}/{secrets.token_hex(12)}",
        "actions": [
            {
                "action_id": action_id,
                "block_id": block_id,
                "text": {"type": "plain_text", "text": _button_label(action_id), "emoji": True},
                "value": value,
                "style": _button_style(action_id),
                "type": "button",
                "action_ts": f"{ts}.{secrets.randbelow(1_000_000):06d}",
            }
        ],
    }
    return _form_payload(payload, signing_secret=signing_secret, timestamp=ts)


def view_submission(
    *,
    signing_secret: str,
    user_id: str,
    callback_id: str,
    private_metadata: str,
    values: dict[str, Any],
    team_id: str = "T0TEAM",
    api_app_id: str = "A0COUNTERSIGN",
    timestamp: int | None = None,
    user_name: str = "someone",
) -> SignedRequest:
    """Build the request Slack sends when ``user_id`` submits a modal.

    ``values`` is ``view.state.values``: block_id -> action_id -> element
    state, e.g. ``{"reason": {"reason_input": {"type": "plain_text_input",
    "value": "too risky"}}}``.
    """
    ts = int(time.time()) if timestamp is None else timestamp
    view_id = f"V{secrets.token_hex(5).upper()}"
    payload: dict[str, Any] = {
        "type": "view_submission",
        "team": {"id": team_id, "domain": _TEAM_DOMAIN},
        "user": _user(user_id, user_name, team_id),
        "api_app_id": api_app_id,
        "token": LEGACY_VERIFICATION_TOKEN,
        "trigger_id": _trigger_id(ts),
        "view": {
            "id": view_id,
            "team_id": team_id,
            "type": "modal",
            "blocks": [],
            "private_metadata": private_metadata,
            "callback_id": callback_id,
            "state": {"values": values},
            "hash": f"{ts}.{secrets.token_hex(4)}",
            "title": {"type": "plain_text", "text": "Countersign", "emoji": True},
            "clear_on_close": False,
            "notify_on_close": False,
            "close": None,
            "submit": {"type": "plain_text", "text": "Submit", "emoji": True},
            "previous_view_id": None,
            "root_view_id": view_id,
            "app_id": api_app_id,
            "external_id": "",
            "app_installed_team_id": team_id,
            "bot_id": _BOT_ID,
        },
        "response_urls": [],
        "enterprise": None,
        "is_enterprise_install": False,
    }
    return _form_payload(payload, signing_secret=signing_secret, timestamp=ts)


def _form_payload(payload: dict[str, Any], *, signing_secret: str, timestamp: int) -> SignedRequest:
    # Slack form-encodes one field, ``payload``, whose value is the JSON.
    body = urlencode({"payload": json.dumps(payload, separators=(",", ":"))})
    return raw(body, signing_secret=signing_secret, timestamp=timestamp)


def _user(user_id: str, user_name: str, team_id: str) -> dict[str, str]:
    return {"id": user_id, "username": user_name, "name": user_name, "team_id": team_id}


def _bot_message(message_ts: str, team_id: str) -> dict[str, Any]:
    return {
        "type": "message",
        "user": _BOT_USER_ID,
        "bot_id": _BOT_ID,
        "team": team_id,
        "ts": message_ts,
        "text": "",
        "blocks": [],
    }


def _trigger_id(timestamp: int) -> str:
    # Real trigger ids look like "<digits>.<digits>.<hex>"; only uniqueness matters.
    return f"{timestamp}.{secrets.randbelow(10**12):012d}.{secrets.token_hex(16)}"


def _is_approve_like(action_id: str) -> bool:
    return any(word in action_id.lower() for word in ("approve", "allow", "accept", "confirm"))


def _button_label(action_id: str) -> str:
    # "countersign_approve" -> "Approve": the last word is the verb on the button.
    last = action_id.replace("-", "_").rsplit("_", 1)[-1] or action_id
    return last.capitalize()


def _button_style(action_id: str) -> str:
    return "primary" if _is_approve_like(action_id) else "danger"
