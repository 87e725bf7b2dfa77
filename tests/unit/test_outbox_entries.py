"""What the core queues, as pure functions of an approval or of fired timers: the outbox entries
of a settlement and of timers, when a scheduled card update is needless, and how a request is
routed (a rule of the policy, or a guard's escalation). The store that writes them is tested on
PostgreSQL (tests/integration/test_service.py, test_store_contract.py, test_paging_ladder.py)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from approvals import errors, models, policy, service
from tests.support.records import T0, approval, decider

K = models.OutboxKind
CALLBACK_URL = "https://agent.internal/approvals"
DECIDED = T0 + timedelta(minutes=1)


def settled(status: models.Status, **changes: Any) -> models.Approval:
    return approval(**changes).evolve(
        status=status, decided_by=(decider("U0APP"),), decided_at=DECIDED
    )


def shape(entries: list[models.OutboxEntry]) -> list[tuple[models.OutboxKind, Any, Any]]:
    """Each entry's kind, stored payload and when it is due (None: at once)."""
    return [(e.kind, models.work_payload(e.work), e.due_at) for e in entries]


# -- a settlement -------------------------------------------------------------------------------


def test_an_approval_re_renders_the_card_calls_back_and_shows_its_lapse() -> None:
    approved = settled(models.Status.APPROVED, callback_url=CALLBACK_URL)
    entries = service._settlement_outbox(approved)
    assert [e.kind for e in entries] == [K.UPDATE_CARD, K.CALLBACK, K.UPDATE_CARD]
    assert {e.approval_id for e in entries} == {approved.approval_id}
    update, callback, lapse = entries
    assert (update.work, update.due_at) == (models.UpdateCard(), None)  # now
    # once more a second after the decision lapses, unless it was claimed by then
    assert lapse.due_at == DECIDED + timedelta(seconds=approved.valid_for + 1)
    assert lapse.work == models.UpdateCard(unless=models.SKIP_IF_CLAIMED)
    assert isinstance(callback.work, models.Callback)
    assert (callback.work.url, callback.work.agent) == (CALLBACK_URL, approved.agent)
    body = json.loads(callback.work.body)  # frozen now: every redelivery sends these very bytes
    assert (body["approval_id"], body["status"]) == (approved.approval_id, "approved")
    assert body["arguments_sha256"] == approved.arguments_sha256
    assert body["decided_by"][0]["slack_user_id"] == "U0APP"
    assert "delivery" not in body


@pytest.mark.parametrize(
    "status", [models.Status.DENIED, models.Status.EXPIRED, models.Status.CANCELLED]
)
def test_a_settlement_other_than_approval_has_no_lapse_to_show(status: models.Status) -> None:
    entries = service._settlement_outbox(settled(status, callback_url=CALLBACK_URL))
    assert [e.kind for e in entries] == [K.UPDATE_CARD, K.CALLBACK]
    callback = entries[1].work
    assert isinstance(callback, models.Callback)
    assert json.loads(callback.body)["status"] == status.value


def test_without_a_callback_url_nothing_is_called_back() -> None:
    assert [e.kind for e in service._settlement_outbox(settled(models.Status.DENIED))] == [
        K.UPDATE_CARD
    ]


def test_a_vote_short_of_the_quorum_only_re_renders_the_card() -> None:
    voted = approval(
        callback_url=CALLBACK_URL, required=models.Required(role="finance", approvals=2)
    ).evolve(decided_by=(decider("U0APP"),))
    assert shape(service._settlement_outbox(voted)) == [(K.UPDATE_CARD, {}, None)]


def test_a_settlement_resolves_every_service_its_ladder_may_page() -> None:
    pages: tuple[models.PageService, ...] = ("opsgenie", "pagerduty")
    entries = service._settlement_outbox(settled(models.Status.DENIED, pages=pages))
    assert shape([e for e in entries if e.kind is K.PAGE]) == [
        (K.PAGE, {"service": "opsgenie", "event": "resolve"}, None),
        # Opsgenie's close once more, later, in case the first overtook its create
        (
            K.PAGE,
            {"service": "opsgenie", "event": "resolve", "again": True},
            DECIDED + timedelta(seconds=60),
        ),
        (K.PAGE, {"service": "pagerduty", "event": "resolve"}, None),
    ]


def test_a_ladder_that_pages_only_pagerduty_is_resolved_once() -> None:
    entries = service._settlement_outbox(settled(models.Status.EXPIRED, pages=("pagerduty",)))
    assert shape([e for e in entries if e.kind is K.PAGE]) == [
        (K.PAGE, {"service": "pagerduty", "event": "resolve"}, None)
    ]


def test_a_pending_approval_resolves_nothing_even_if_it_may_page() -> None:
    pending = approval(pages=("opsgenie",)).evolve(decided_by=(decider("U0APP"),))
    assert [e.kind for e in service._settlement_outbox(pending)] == [K.UPDATE_CARD]


# -- fired timers ------------------------------------------------------------------------------


def timer(kind: models.TimerKind, step: int, page: models.Page | None = None) -> models.TimerEntry:
    return models.TimerEntry(
        approval_id=approval().approval_id, kind=kind, step=step, due_at=T0, page=page
    )


def test_a_reminder_queues_a_reminder_only() -> None:
    assert shape(models.timer_outbox([timer("remind", 0)])) == [(K.REMIND, {"step": 0}, None)]


def test_an_escalation_re_renders_the_card() -> None:
    assert shape(models.timer_outbox([timer("escalate", 1)])) == [
        (K.ESCALATE, {"step": 1}, None),
        (K.UPDATE_CARD, {}, None),
    ]


def test_an_escalation_that_pages_triggers_each_service_on_a_row_of_its_own() -> None:
    page = models.Page(services=("pagerduty", "opsgenie"), severity="critical")
    assert shape(models.timer_outbox([timer("remind", 0), timer("escalate", 2, page)])) == [
        (K.REMIND, {"step": 0}, None),
        (K.ESCALATE, {"step": 2}, None),
        (K.UPDATE_CARD, {}, None),
        (
            K.PAGE,
            {"service": "pagerduty", "event": "trigger", "severity": "critical", "step": 2},
            None,
        ),
        (
            K.PAGE,
            {"service": "opsgenie", "event": "trigger", "severity": "critical", "step": 2},
            None,
        ),
    ]


def test_no_timer_queues_nothing() -> None:
    assert models.timer_outbox([]) == []


def test_the_immediate_escalation_is_due_at_creation_outside_every_ladder() -> None:
    a = approval()
    assert service._immediate_escalation(a) == models.TimerEntry(
        approval_id=a.approval_id,
        kind="escalate",
        step=service.IMMEDIATE_ESCALATION_STEP,
        due_at=a.created_at,
    )
    assert service.IMMEDIATE_ESCALATION_STEP < 0  # never one of a ladder's rungs


# -- a scheduled card update -------------------------------------------------------------------


def claimed(outcome: models.ExecutionOutcome | None = None) -> models.Approval:
    execution = models.Execution(
        claim_id="exc_1", idempotency_key="k1", claimed_at=DECIDED, outcome=outcome
    )
    return settled(models.Status.APPROVED).evolve(execution=execution)


@pytest.mark.parametrize(
    ("unless", "state", "needless"),
    [
        (models.SKIP_IF_CLAIMED, "approved", False),
        (models.SKIP_IF_CLAIMED, "claimed", True),
        (models.SKIP_IF_REPORTED, "claimed", False),
        (models.SKIP_IF_REPORTED, "reported", True),
        (None, "reported", False),  # a card update due now is never needless
    ],
)
def test_a_scheduled_card_update_is_skipped_once_it_would_show_nothing_new(
    unless: models.Unless | None, state: str, needless: bool
) -> None:
    ok = models.ExecutionOutcome(status="ok", detail="", reported_at=DECIDED)
    current = {
        "approved": settled(models.Status.APPROVED),
        "claimed": claimed(),
        "reported": claimed(ok),
    }[state]
    entry = models.card_update(current.approval_id, DECIDED, unless=unless)
    assert isinstance(entry.work, models.UpdateCard)
    assert entry.work.needless(current) is needless


# -- routing a request -------------------------------------------------------------------------

POLICY = policy.Policy.model_validate(
    {
        "slack": {"reviewer_channel": "C0REVIEWS"},
        "agents": {"sales-bot": {"token_env": "SALES_BOT_TOKEN"}},
        "roles": {"approvers": {"users": ["U0ANA"]}, "finance": {"usergroups": ["S0FIN"]}},
        "rules": [
            {"tool": "transfer_*", "require": "finance"},
            {"tool": "*", "require": "approvers"},
        ],
        "tools": {
            "transfer_money": {
                "arguments": {
                    "type": "object",
                    "properties": {"amount": {"type": "number"}},
                    "required": ["amount"],
                }
            }
        },
    }
)


def request(tool: str, arguments: dict[str, Any]) -> models.ApprovalRequest:
    return models.ApprovalRequest.model_validate(
        {
            "request_id": "r-1",
            "session_id": "s-1",
            "tool": {"name": tool, "call_id": "c1", "arguments": arguments},
            "requester": {"slack_user_id": "U0REQ"},
        }
    )


def test_a_request_is_routed_by_the_first_rule_that_matches() -> None:
    routed = service._route(POLICY, request("transfer_money", {"amount": 5}), None)
    assert (routed.rule.require, routed.name, routed.outsiders) == (
        "finance",
        "rules[0] tool=transfer_*",
        (),
    )
    fallback = service._route(POLICY, request("launch_rockets", {}), None)
    assert (fallback.rule.require, fallback.name) == ("approvers", "rules[1] tool=*")


def test_arguments_the_rules_cannot_judge_are_refused_before_routing() -> None:
    with pytest.raises(errors.InvalidArguments):
        service._route(POLICY, request("transfer_money", {"amount": "five"}), None)


def test_a_guards_escalation_is_routed_to_its_role_whatever_the_rules_say() -> None:
    outsider = models.Outsider(email="lena@customer.example")
    escalation = service.Escalation(
        role="finance", rule="tools.grant_discount.limits[0]", outsiders=(outsider,), why="15 > 10"
    )
    # the arguments are not judged by the rules' schemas: the guard has judged the turn
    routed = service._route(POLICY, request("transfer_money", {"amount": "five"}), escalation)
    assert routed.rule == policy.Rule(tool="transfer_money", require="finance")
    assert (routed.name, routed.why, routed.outsiders) == (
        "tools.grant_discount.limits[0]",
        "15 > 10",
        (outsider,),
    )
