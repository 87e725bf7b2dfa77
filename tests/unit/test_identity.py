"""The identity types have one home: the wire, the policy and the pure guards agree on them."""

from __future__ import annotations

import typing
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from approvals import identity, models, policy
from guards import turns


def test_lead_channels_are_the_guards_own() -> None:
    # guards imports nothing of ours, so it keeps its own tuple: the two must never drift
    assert typing.get_args(identity.LeadChannel) == turns.CHANNELS


@pytest.mark.parametrize("model", [models.Operator, policy.Owner])
def test_operator_and_owner_are_requesters(model: type[models.Requester]) -> None:
    assert issubclass(model, models.Requester)
    assert model.model_fields.keys() == models.Requester.model_fields.keys()


@pytest.mark.parametrize(
    ("type_", "good", "bad"),
    [
        (identity.SlackUserId, ["U0ANA", "W0LENA"], ["C0REVIEWS", "u0ana", "U0", "@ana"]),
        (identity.SlackChannelId, ["C0REVIEWS", "G0PRIVATE"], ["#reviews", "U0ANA", "C0"]),
        (identity.SlackUsergroupId, ["S0FINANCE"], ["@finance", "U0ANA", "S0"]),
        (identity.AgentName, ["sales-bot", "ops_bot.2"], ["Sales-bot", "-bot", ""]),
    ],
)
def test_id_patterns(type_: Any, good: list[str], bad: list[str]) -> None:
    adapter: TypeAdapter[str] = TypeAdapter(type_)
    assert [adapter.validate_python(value) for value in good] == good
    for value in bad:
        with pytest.raises(ValidationError):
            adapter.validate_python(value)


def test_one_email_spelling_on_the_wire_and_in_the_policy() -> None:
    requester = models.Requester(email="Ana@Example.com")
    owner = policy.Owner(email="Ana@Example.com")
    assert requester.email == owner.email == "ana@example.com"
    for bad in ("ana", "ana@@example.com", "ana @example.com", "ana@example.com\x1c"):
        with pytest.raises(ValidationError):
            models.Requester(email=bad)
        with pytest.raises(ValidationError):
            policy.Owner(email=bad)
