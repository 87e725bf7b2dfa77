"""Typed views of wire contract v1 (lenient on extra fields: newer servers may add some)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "Approval",
    "Decider",
    "Edit",
    "Execution",
    "ExecutionOutcome",
    "GrantUse",
    "Requester",
    "ToolCall",
]

Status = Literal["pending", "approved", "denied", "expired", "cancelled"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow")


class ToolCall(_Model):
    name: str
    call_id: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class Requester(_Model):
    slack_user_id: str | None = None
    email: str | None = None
    name: str | None = None


class PasskeyUse(_Model):
    """A vote confirmed with a passkey (a rule with ``verify: passkey``)."""

    credential_id: str
    at: datetime


class Decider(_Model):
    slack_user_id: str
    name: str | None = None
    at: datetime
    passkey: PasskeyUse | None = None


class GrantUse(_Model):
    """On a call a standing grant approved at once: the grant, and which of its uses this was."""

    id: str
    use: int
    of: int


class EditedBy(_Model):
    slack_user_id: str
    name: str | None = None


class Edit(_Model):
    """A reviewer's edit: once approved, only ``arguments`` may run (their hash is
    ``arguments_sha256``); ``patch`` is the RFC 6902 change from the requested arguments."""

    arguments: dict[str, Any]
    arguments_sha256: str
    patch: list[dict[str, Any]] = Field(default_factory=list)
    by: EditedBy
    at: datetime
    note: str | None = None
    # the approval of the model's call again with exactly these arguments, once there is one:
    # that call runs them, this approval can no longer be claimed
    called_again_as: str | None = None


class ExecutionOutcome(_Model):
    """What the claimer reported after running the call."""

    status: Literal["ok", "error"]
    detail: str = ""
    reported_at: datetime


class Execution(_Model):
    """The one claim to run an approved call (its idempotency key is never shown)."""

    claim_id: str
    claimed_at: datetime
    outcome: ExecutionOutcome | None = None


class Approval(_Model):
    """The approval resource; settled, it is the decision bound to one request."""

    approval_id: str
    status: Status
    agent: str
    request_id: str
    session_id: str
    tool: ToolCall
    arguments_sha256: str
    requester: Requester
    required: dict[str, Any] = Field(default_factory=dict)
    decided_by: list[Decider] = Field(default_factory=list)
    reason: str | None = None
    created_at: datetime
    expires_at: datetime
    decided_at: datetime | None = None
    policy_version: str
    resume: dict[str, Any] | None = None
    # approved: the last instant the call may be claimed to run (decided_at + the rule's
    # valid_for); None otherwise, and from servers that predate single-use claims
    valid_until: datetime | None = None
    execution: Execution | None = None
    edit: Edit | None = None  # a reviewer's edit: what may run instead of tool.arguments
    # a call again with exactly another approval's edited arguments, approved at once on that
    # edit: that approval's id (servers before edits send none)
    edit_of: str | None = None
    # approved at once by a standing grant (servers before grants send none)
    grant: GrantUse | None = None
    # approved at once by a rule that decides by itself: {"rule", "policy_version"}
    decided_by_policy: dict[str, str] | None = None

    @property
    def run_sha256(self) -> str:
        """The hash of the arguments that may run: the edit's, else the requested ones'."""
        return self.edit.arguments_sha256 if self.edit is not None else self.arguments_sha256

    @property
    def settled(self) -> bool:
        return self.status != "pending"

    @property
    def approved(self) -> bool:
        """Only an explicit approval is a yes: expired and cancelled are not."""
        return self.status == "approved"
