"""Countersign's agent-side client: submit a pending tool call, wait for the decision, verify
signed callbacks, and check that a decision is bound to the request still pending.

Depends on aiohttp and pydantic only, so an agent can install it without the server's stack.
Framework adapters live in :mod:`countersign_client.adapters` (each imports its framework).
"""

from countersign_client.binding import PendingCall, arguments_sha256, check_binding
from countersign_client.client import CountersignClient
from countersign_client.errors import (
    ApiError,
    BindingMismatch,
    Conflict,
    CountersignClientError,
    DuplicateDelivery,
    InvalidRequest,
    NotFound,
    SignatureError,
    Unauthorized,
)
from countersign_client.models import Approval, Requester, ToolCall
from countersign_client.verify import CallbackVerifier

__all__ = [
    "ApiError",
    "Approval",
    "BindingMismatch",
    "CallbackVerifier",
    "Conflict",
    "CountersignClient",
    "CountersignClientError",
    "DuplicateDelivery",
    "InvalidRequest",
    "NotFound",
    "PendingCall",
    "Requester",
    "SignatureError",
    "ToolCall",
    "Unauthorized",
    "arguments_sha256",
    "check_binding",
]
