"""Signed HTTP requests shaped like the ones Slack sends to an app.

The builders live in :mod:`bot.sandbox.signing`, where the sandbox page signs its clicks with
them; tests import them from here as before. See that module for the shapes and the signature.
"""

from __future__ import annotations

from bot.sandbox.signing import (
    FORM_CONTENT_TYPE,
    LEGACY_VERIFICATION_TOKEN,
    SignedRequest,
    app_home_opened,
    block_actions,
    raw,
    sign,
    view_submission,
)

__all__ = [
    "FORM_CONTENT_TYPE",
    "LEGACY_VERIFICATION_TOKEN",
    "SignedRequest",
    "app_home_opened",
    "block_actions",
    "raw",
    "sign",
    "view_submission",
]
