"""Countersign's agent-side client: submit a pending tool call, wait for the decision, verify
signed callbacks, check that a decision is bound to the request still pending, and run an
approved call at most once (:mod:`countersign_client.execution`: claim, run, report).

Depends on aiohttp and pydantic only, so an agent can install it without the server's stack.
Framework adapters live in :mod:`countersign_client.adapters` (each imports its framework).
"""

from countersign_client.binding import PendingCall, arguments_sha256, check_binding, check_edit
from countersign_client.client import CountersignClient
from countersign_client.errors import (
    AlreadyClaimed,
    ApiError,
    BindingMismatch,
    CalledAgain,
    Conflict,
    CountersignClientError,
    DecisionLapsed,
    DuplicateDelivery,
    InvalidRequest,
    NotApproved,
    NotClaimed,
    NotFound,
    NotTheseArguments,
    OutcomeAlreadyReported,
    SignatureError,
    Unauthorized,
)
from countersign_client.models import (
    Approval,
    Edit,
    Execution,
    ExecutionOutcome,
    GrantUse,
    Requester,
    ToolCall,
)
from countersign_client.verify import CallbackVerifier

__all__ = [
    "AlreadyClaimed",
    "ApiError",
    "Approval",
    "BindingMismatch",
    "CallbackVerifier",
    "CalledAgain",
    "Conflict",
    "CountersignClient",
    "CountersignClientError",
    "DecisionLapsed",
    "DuplicateDelivery",
    "Edit",
    "Execution",
    "ExecutionOutcome",
    "GrantUse",
    "InvalidRequest",
    "NotApproved",
    "NotClaimed",
    "NotFound",
    "NotTheseArguments",
    "OutcomeAlreadyReported",
    "PendingCall",
    "Requester",
    "SignatureError",
    "ToolCall",
    "Unauthorized",
    "arguments_sha256",
    "check_binding",
    "check_edit",
]
