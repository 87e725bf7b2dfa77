"""Who and where, as the wire and the policy file spell them: Slack ids, e-mail, agent names,
lead channels, and the strict frozen base model every such model is built on.

One home for each pattern, so the wire (and ``docs/openapi.json``, generated from it) and the
policy file can never disagree on what a Slack id or an e-mail address is.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, StringConstraints

__all__ = [
    "AGENT_NAME_PATTERN",
    "EMAIL",
    "EMAIL_PATTERN",
    "SLACK_CHANNEL_PATTERN",
    "SLACK_USERGROUP_PATTERN",
    "SLACK_USER_ID",
    "SLACK_USER_PATTERN",
    "AgentName",
    "Email",
    "Frozen",
    "LeadChannel",
    "SlackChannelId",
    "SlackUserId",
    "SlackUsergroupId",
]


class Frozen(BaseModel):
    """Frozen and strict: an unknown key is an error naming it, never a silently ignored value
    (a typo in an agent's payload or in the policy file)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def evolve(self, **changes: Any) -> Self:
        """A copy with ``changes`` applied and validated again."""
        return type(self).model_validate({**self.model_dump(), **changes})


SLACK_USER_PATTERN = r"^[UW][A-Z0-9]{2,30}$"
SLACK_CHANNEL_PATTERN = r"^[CG][A-Z0-9]{2,30}$"  # public or private channel
SLACK_USERGROUP_PATTERN = r"^S[A-Z0-9]{2,30}$"
# Every engine that checks this pattern must agree on it (Python's re here, pydantic's Rust
# engine on the wire, JavaScript-style engines reading docs/openapi.json): their \s differ, so
# the characters any of them counts as space are listed too.
EMAIL_PATTERN = r"^[^@\s\x1c-\x1f\x85\uFEFF]{1,64}@[^@\s\x1c-\x1f\x85\uFEFF]{1,255}$"
AGENT_NAME_PATTERN = r"^[a-z0-9][a-z0-9_.-]*$"

SLACK_USER_ID = re.compile(SLACK_USER_PATTERN)
EMAIL = re.compile(EMAIL_PATTERN)

SlackUserId = Annotated[str, StringConstraints(pattern=SLACK_USER_PATTERN)]
SlackChannelId = Annotated[str, StringConstraints(pattern=SLACK_CHANNEL_PATTERN)]
SlackUsergroupId = Annotated[str, StringConstraints(pattern=SLACK_USERGROUP_PATTERN)]
# lower-cased: two spellings of one address are one person (four eyes compares them)
Email = Annotated[str, StringConstraints(pattern=EMAIL_PATTERN, to_lower=True, max_length=320)]
AgentName = Annotated[str, StringConstraints(pattern=AGENT_NAME_PATTERN)]

# where a lead-facing conversation happens; guards.turns.CHANNELS is the pure engine's copy
# (guards imports nothing of ours), held equal by a test
LeadChannel = Literal["whatsapp", "sms", "webchat", "email"]
