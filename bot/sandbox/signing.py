"""Signed HTTP requests shaped like the ones Slack sends to an app.

Slack signs every request to the app's Request URL ("Verifying requests from Slack"):
``X-Slack-Signature`` is ``v0=`` plus the hex HMAC-SHA256, keyed with the signing secret, of
``v0:{timestamp}:{raw body}``. Interactive payloads arrive form-encoded as a single ``payload``
field holding JSON; Events API callbacks arrive as a JSON body.

The builders produce byte for byte what the app's HTTP endpoint would receive, so the sandbox
page (and the tests) drive the real signature check and payload parsing instead of calling
listeners directly. Field sets follow Slack's block_actions, view_submission and event_callback
payload references, trimmed to what a bot might read.
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

__all__ = [
    "FORM_CONTENT_TYPE",
    "JSON_CONTENT_TYPE",
    "LEGACY_VERIFICATION_TOKEN",
    "SignedRequest",
    "app_home_opened",
    "block_actions",
    "raw",
    "sign",
    "trigger_id",
    "view_submission",
]

FORM_CONTENT_TYPE = "application/x-www-form-urlencoded"
JSON_CONTENT_TYPE = "application/json"

# Slack still sends the deprecated verification token in every payload. Apps must ignore it in
# favour of the signature; a fixed fake value lets a test notice if something starts trusting it.
LEGACY_VERIFICATION_TOKEN = "legacy-verification-token-not-for-auth"  # noqa: S105 - not a secret

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
    """Slack's signature headers (and Content-Type) for ``body``.

    ``timestamp`` defaults to now; pass an old one to test replay rejection (Slack's guidance
    is to refuse anything more than five minutes off).
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
    """Sign an arbitrary body (for malformed or unexpected payloads, and event callbacks)."""
    return SignedRequest(
        body=body,
        headers=sign(body, signing_secret, timestamp=timestamp, content_type=content_type),
    )


def trigger_id(timestamp: int | None = None) -> str:
    """A fresh trigger id. Real ones look like ``<digits>.<digits>.<hex>``; only uniqueness
    matters (``views.open`` names the click it answers by it)."""
    ts = int(time.time()) if timestamp is None else timestamp
    return f"{ts}.{secrets.randbelow(10**12):012d}.{secrets.token_hex(16)}"


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
    button_text: str | None = None,
    button_style: str | None = None,
    view: dict[str, Any] | None = None,
) -> SignedRequest:
    """The request Slack sends when ``user_id`` clicks a button.

    On a message (the default): ``message`` is the message the button sits on, as Slack echoes
    it back; by default a minimal bot message with ``message_ts``, the ts of the first message
    a fresh stand-in posts. ``response_url`` defaults to a hooks.slack.com address, which
    nothing here can reach (no network); pass one if the code under test uses it.

    In a view (``view``, e.g. the App Home as published): the payload has the view instead of
    a channel and a message, as Slack sends it. ``button_text`` and ``button_style`` default to
    a guess from ``action_id``; the sandbox passes the button's own.
    """
    ts = int(time.time()) if timestamp is None else timestamp
    payload: dict[str, Any] = {
        "type": "block_actions",
        "user": _user(user_id, user_name, team_id),
        "api_app_id": api_app_id,
        "token": LEGACY_VERIFICATION_TOKEN,
        "trigger_id": trigger_id or _trigger_id(ts),
        "team": {"id": team_id, "domain": _TEAM_DOMAIN},
        "enterprise": None,
        "is_enterprise_install": False,
        "state": {"values": {}},
        "actions": [
            {
                "action_id": action_id,
                "block_id": block_id,
                "text": _plain_text(button_text or _button_label(action_id)),
                "value": value,
                "style": button_style or _button_style(action_id),
                "type": "button",
                "action_ts": f"{ts}.{secrets.randbelow(1_000_000):06d}",
            }
        ],
    }
    if view is not None:
        payload["container"] = {"type": "view", "view_id": view.get("id", "")}
        payload["view"] = view
    else:
        payload |= _on_message(channel_id, message_ts, team_id, ts, message, response_url)
    return _form_payload(payload, signing_secret=signing_secret, timestamp=ts)


def _plain_text(text: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": text, "emoji": True}


def _on_message(
    channel_id: str,
    message_ts: str,
    team_id: str,
    ts: int,
    message: dict[str, Any] | None,
    response_url: str | None,
) -> dict[str, Any]:
    """The keys of a ``block_actions`` payload for a button on a message, as Slack sends them."""
    return {
        "container": {
            "type": "message",
            "message_ts": message_ts,
            "channel_id": channel_id,
            "is_ephemeral": False,
        },
        "channel": {"id": channel_id, "name": channel_id.lower()},
        "message": message if message is not None else _bot_message(message_ts, team_id),
        "response_url": response_url
        or f"https://hooks.slack.com/actions/{team_id}/{ts}/{secrets.token_hex(12)}",
    }


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
    blocks: list[dict[str, Any]] | None = None,
    view_id: str | None = None,
) -> SignedRequest:
    """The request Slack sends when ``user_id`` submits a modal.

    ``values`` is ``view.state.values``: block_id -> action_id -> element state, e.g.
    ``{"reason": {"reason_input": {"type": "plain_text_input", "value": "too risky"}}}``.
    """
    ts = int(time.time()) if timestamp is None else timestamp
    view_id = view_id or f"V{secrets.token_hex(5).upper()}"
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
            "blocks": blocks or [],
            "private_metadata": private_metadata,
            "callback_id": callback_id,
            "state": {"values": values},
            "hash": f"{ts}.{secrets.token_hex(4)}",
            "title": _plain_text("Countersign"),
            "clear_on_close": False,
            "notify_on_close": False,
            "close": None,
            "submit": _plain_text("Submit"),
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


def app_home_opened(
    *,
    signing_secret: str,
    user_id: str,
    team_id: str = "T0TEAM",
    api_app_id: str = "A0COUNTERSIGN",
    timestamp: int | None = None,
) -> SignedRequest:
    """The Events API callback Slack sends when ``user_id`` opens the app's Home tab."""
    ts = int(time.time()) if timestamp is None else timestamp
    payload: dict[str, Any] = {
        "token": LEGACY_VERIFICATION_TOKEN,
        "team_id": team_id,
        "api_app_id": api_app_id,
        "event": {
            "type": "app_home_opened",
            "user": user_id,
            "channel": f"D0{user_id[1:]}",
            "tab": "home",
            "event_ts": f"{ts}.{secrets.randbelow(1_000_000):06d}",
        },
        "type": "event_callback",
        "event_id": f"Ev{secrets.token_hex(6).upper()}",
        "event_time": ts,
        "authorizations": [
            {"team_id": team_id, "user_id": _BOT_USER_ID, "is_bot": True, "enterprise_id": None}
        ],
    }
    body = json.dumps(payload, separators=(",", ":"))
    return raw(body, signing_secret=signing_secret, content_type=JSON_CONTENT_TYPE, timestamp=ts)


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
    return trigger_id(timestamp)


def _is_approve_like(action_id: str) -> bool:
    return any(word in action_id.lower() for word in ("approve", "allow", "accept", "confirm"))


def _button_label(action_id: str) -> str:
    # "countersign_approve" -> "Approve": the last word is the verb on the button.
    last = action_id.replace("-", "_").rsplit("_", 1)[-1] or action_id
    return last.capitalize()


def _button_style(action_id: str) -> str:
    return "primary" if _is_approve_like(action_id) else "danger"
