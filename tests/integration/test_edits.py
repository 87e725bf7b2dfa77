"""Approve with edits, on real PostgreSQL: every way an edit could say yes where its author's
own click could not is refused, and what it approves is bound to the edited arguments' hash."""

from __future__ import annotations

import asyncio
import itertools
import json
from datetime import timedelta
from typing import Any

import pytest

from approvals import edits, errors, hashing, models, policy, resource, service
from approvals.repository import Repository
from guards import authority
from tests.integration.test_service import (
    CALLBACK_URL,
    FAR,
    T0,
    FakeClock,
    FakeDirectory,
    make_request,
)
from tests.support import reads

S = models.Status
AGENT = "sales-bot"


def person(uid: str, *groups: str) -> authority.Approver:
    return authority.Approver(
        slack_user_id=uid,
        email=f"{uid.lower()}@example.com",
        name=uid,
        usergroups=frozenset(groups),
    )


REQUESTER = authority.Approver(
    slack_user_id="U0REQ", email="rita@example.com", name="Rita", usergroups=frozenset({"S0FIN"})
)
JUNIOR = person("U0JUNIOR", "S0FIN")  # finance, up to 1 000
SENIOR = person("U0SENIOR", "S0FIN", "S0SENIOR")  # finance and senior, unlimited
SENIOR2 = person("U0SENIOR2", "S0FIN", "S0SENIOR")
OUTSIDE = person("U0OUTSIDE")
DIRECTORY = FakeDirectory(REQUESTER, JUNIOR, SENIOR, SENIOR2, OUTSIDE)

SCHEMA = {
    "type": "object",
    "properties": {
        "amount": {"type": "number", "minimum": 1},
        "currency": {"type": "string", "enum": ["EUR", "USD"]},
        "memo": {"type": "string", "maxLength": 140},
        "urgent": {"type": "boolean"},
    },
    "required": ["amount", "currency"],
}


def make_policy() -> policy.Policy:
    editable = ["amount", "memo", "urgent", "currency"]
    return policy.Policy.model_validate(
        {
            "slack": {"reviewer_channel": "C0REVIEWS"},
            "agents": {
                AGENT: {
                    "token_env": "SALES_BOT_TOKEN",
                    "callback_secret_env": "SALES_BOT_SIGNING",
                    "callback_hosts": ["agent.internal"],
                }
            },
            "roles": {
                "junior": {"usergroups": ["S0FIN"], "ceiling": {"amount": 1000}},
                "senior": {"usergroups": ["S0SENIOR"]},
                "approvers": {"users": ["U0OUTSIDE"]},
            },
            "tools": {"transfer_money": {"arguments": SCHEMA}},
            "rules": [
                # large transfers need two seniors
                {
                    "tool": "transfer_*",
                    "when": {"field": "arguments.amount", "gt": 10000},
                    "require": "senior",
                    "approvals": 2,
                    "editable": editable,
                },
                {"tool": "transfer_*", "require": ["junior", "senior"], "editable": editable},
                {"tool": "*", "require": "approvers"},
            ],
        }
    )


class World:
    def __init__(self, store: Repository) -> None:
        self.clock = FakeClock()
        self.store = store
        self.policy = make_policy()
        ids = itertools.count(1)
        self.service = service.ApprovalService(
            store=store,
            policy=lambda: self.policy,
            clock=self.clock,
            new_id=lambda: f"apr_{next(ids):024x}",
        )

    async def submit(self, **arguments: Any) -> models.Approval:
        args = {"amount": 500, "currency": "EUR", "memo": "invoice 42", "urgent": False}
        args.update(arguments)
        request = make_request(
            tool={"name": "transfer_money", "call_id": "call_1", "arguments": args}
        )
        approval, created = await self.service.submit(AGENT, request)
        assert created
        return approval

    async def edit(
        self, approval: models.Approval, who: authority.Approver, **changes: object
    ) -> service.EditResult:
        return await self.service.edit(
            approval.approval_id,
            slack_user_id=who.slack_user_id,
            changes=changes,
            directory=DIRECTORY,
            seen=approval.run_sha256,
        )

    async def attempts(self, approval: models.Approval) -> list[tuple[str, str, str]]:
        found = await self.store.attempts(approval.approval_id)
        return [(a.slack_user_id, a.action, a.outcome.value) for a in found]

    async def unchanged(self, approval: models.Approval) -> None:
        """Nothing of an edit was written: same version, votes and status."""
        now = await self.service.get(approval.approval_id)
        assert (now.edit, now.decided_by, now.status, now.required) == (
            approval.edit,
            approval.decided_by,
            approval.status,
            approval.required,
        )


@pytest.fixture
def world(store: Repository) -> World:
    return World(store)


async def test_an_edit_approves_the_edited_call_bound_to_its_own_hash(world: World) -> None:
    approval = await world.submit(amount=900)
    result = await world.edit(approval, JUNIOR, amount=90, memo="invoice 42 (partial)")
    assert isinstance(result, service.Settled)
    done = result.approval
    assert done.status is S.APPROVED
    edit = done.edit
    assert edit is not None
    # the requested arguments and their hash stay; the edit carries what may run
    assert done.tool.arguments["amount"] == 900
    assert done.arguments_sha256 == approval.arguments_sha256
    assert edit.arguments == {
        **approval.tool.arguments,
        "amount": 90,
        "memo": "invoice 42 (partial)",
    }
    assert edit.arguments_jcs.encode() == hashing.canonical_json(edit.arguments)
    assert edit.arguments_sha256 == hashing.sha256_hex(edit.arguments_jcs.encode())
    assert list(edit.patch) == [
        {"op": "replace", "path": "/amount", "value": 90},
        {"op": "replace", "path": "/memo", "value": "invoice 42 (partial)"},
    ]
    assert edit.by.slack_user_id == JUNIOR.slack_user_id
    assert [d.arguments_sha256 for d in done.decided_by] == [edit.arguments_sha256]
    # the resource: edit beside the requested arguments, embedded byte for byte
    body = resource.render(done).decode()
    assert f'"arguments":{edit.arguments_jcs}' in body
    parsed = json.loads(body)
    assert parsed["edit"]["arguments_sha256"] == edit.arguments_sha256
    assert parsed["arguments_sha256"] == approval.arguments_sha256
    assert parsed["resume"]["arguments"] == edit.arguments  # generic: what may run
    # the callback frozen at settlement carries the edit
    items = await world.store.claim_outbox(FAR, FAR, 1000)
    [callback] = [i.work_as(models.Callback) for i in items if i.kind is models.OutboxKind.CALLBACK]
    assert callback.url == CALLBACK_URL
    assert json.loads(callback.body)["edit"]["arguments"] == edit.arguments
    assert await world.attempts(approval) == [("U0JUNIOR", "edit", "accepted")]


async def test_the_requester_cannot_edit_their_own_call(world: World) -> None:
    approval = await world.submit()
    result = await world.edit(approval, REQUESTER, amount=400)
    assert isinstance(result, service.Refused)
    assert result.verdict.outcome is authority.Outcome.SELF
    await world.unchanged(approval)
    assert await world.attempts(approval) == [("U0REQ", "edit", "self")]


async def test_an_editor_whose_ceiling_covers_the_original_but_not_the_edit_is_refused(
    world: World,
) -> None:
    approval = await world.submit(amount=900)
    result = await world.edit(approval, JUNIOR, amount=5000)
    assert isinstance(result, service.Refused)
    assert result.verdict.outcome is authority.Outcome.OVER_LIMIT
    assert "the edited call needs role junior or senior" in result.verdict.reason
    assert "5000" in result.verdict.reason
    await world.unchanged(approval)


async def test_an_edit_into_a_stricter_rule_needs_its_role_and_its_quorum(world: World) -> None:
    approval = await world.submit(amount=900)
    # a junior cannot move it into the two-senior rule
    refused = await world.edit(approval, JUNIOR, amount=20000)
    assert isinstance(refused, service.Refused)
    assert "senior" in refused.verdict.reason
    await world.unchanged(approval)
    # a senior can: the edit is their vote, and the card asks for one more senior
    voted = await world.edit(approval, SENIOR, amount=20000)
    assert isinstance(voted, service.Voted)
    pending = voted.approval
    assert pending.status is S.PENDING
    assert (pending.required.role, pending.required.approvals) == ("senior", 2)
    assert pending.rule.startswith("rules[0]")
    assert [d.slack_user_id for d in pending.decided_by] == ["U0SENIOR"]
    # a click on the card as it was before the edit does not count for the edited call
    stale = await world.service.click(
        approval.approval_id,
        action="approve",
        slack_user_id="U0SENIOR2",
        directory=DIRECTORY,
        arguments_sha256=approval.arguments_sha256,
    )
    assert isinstance(stale, service.Outdated)
    # one without a version is taken as one on the requested arguments: refused too
    unversioned = await world.service.click(
        approval.approval_id, action="approve", slack_user_id="U0SENIOR2", directory=DIRECTORY
    )
    assert isinstance(unversioned, service.Outdated)
    # the junior's ceiling is judged on the edited amount as well
    junior = await world.service.click(
        approval.approval_id,
        action="approve",
        slack_user_id="U0JUNIOR",
        directory=DIRECTORY,
        arguments_sha256=pending.run_sha256,
    )
    assert isinstance(junior, service.Refused)
    settled = await world.service.click(
        approval.approval_id,
        action="approve",
        slack_user_id="U0SENIOR2",
        directory=DIRECTORY,
        arguments_sha256=pending.run_sha256,
    )
    assert isinstance(settled, service.Settled)
    assert settled.approval.status is S.APPROVED
    assert {d.arguments_sha256 for d in settled.approval.decided_by} == {pending.run_sha256}
    outcomes = [o for _, _, o in await world.attempts(approval)]
    assert outcomes.count("edited") == 2


async def test_an_edit_drops_the_votes_given_to_the_version_before(world: World) -> None:
    approval = await world.submit(amount=20000)
    first = await world.service.click(
        approval.approval_id,
        action="approve",
        slack_user_id="U0SENIOR",
        directory=DIRECTORY,
        arguments_sha256=approval.arguments_sha256,
    )
    assert isinstance(first, service.Voted)
    voted = await world.edit(first.approval, SENIOR2, amount=15000)
    assert isinstance(voted, service.Voted)  # SENIOR's vote was for 20 000: it no longer counts
    assert [d.slack_user_id for d in voted.approval.decided_by] == ["U0SENIOR2"]
    assert ("U0SENIOR", "approve", "vote_dropped") in await world.attempts(approval)
    again = await world.service.click(
        approval.approval_id,
        action="approve",
        slack_user_id="U0SENIOR",
        directory=DIRECTORY,
        arguments_sha256=voted.approval.run_sha256,
    )
    assert isinstance(again, service.Settled)


async def test_a_path_not_editable_is_refused_whole_and_recorded(world: World) -> None:
    approval = await world.submit()
    # a forged submission: a listed field beside one the rule does not list
    result = await world.edit(approval, JUNIOR, amount=400, **{"recipient.iban": "XX00"})
    assert isinstance(result, service.EditRefused)
    assert [p.path for p in result.problems if p.forged] == ["recipient.iban"]
    await world.unchanged(approval)  # not even the listed field changed
    assert await world.attempts(approval) == [("U0JUNIOR", "edit", "invalid_edit")]


@pytest.mark.parametrize(
    ("changes", "path"),
    [
        ({"amount": "400"}, "amount"),  # a string where a number was
        ({"urgent": "yes"}, "urgent"),
        ({"amount": float("inf")}, "amount"),
        ({"amount": 2**60}, "amount"),
        ({"memo": "\ud800"}, "memo"),  # a lone surrogate
        ({"memo": "a\x00b"}, "memo"),  # NUL: PostgreSQL stores no NUL (intake refuses it too)
        ({"amount": -5}, "amount"),  # breaks the schema's minimum
        ({"currency": "GBP"}, "currency"),  # breaks the schema's enum
        ({"memo": "x" * 141}, "memo"),
        ({"amount": 500}, None),  # nothing changed
    ],
)
async def test_values_that_cannot_apply_change_nothing(
    world: World, changes: dict[str, object], path: str | None
) -> None:
    approval = await world.submit()
    result = await world.edit(approval, JUNIOR, **changes)
    assert isinstance(result, service.EditRefused), result
    assert path in [p.path for p in result.problems]
    await world.unchanged(approval)


@pytest.mark.parametrize("how", ["approved", "denied", "cancelled", "expired"])
async def test_an_edit_of_a_settled_call_changes_nothing(world: World, how: str) -> None:
    approval = await world.submit()
    if how == "approved":
        await world.service.click(
            approval.approval_id, action="approve", slack_user_id="U0JUNIOR", directory=DIRECTORY
        )
    elif how == "denied":
        await world.service.click(
            approval.approval_id, action="deny", slack_user_id="U0JUNIOR", directory=DIRECTORY
        )
    elif how == "cancelled":
        await world.service.cancel(approval.approval_id, agent=AGENT)
    else:
        world.clock.advance(3601)
    before = await world.service.get(approval.approval_id)
    result = await world.edit(approval, SENIOR, amount=400)
    assert isinstance(result, service.Stale | service.Expired)
    after = await world.service.get(approval.approval_id)
    assert after.edit is None
    assert after.status is (S.EXPIRED if how == "expired" else before.status)
    # and replayed: the same again
    assert isinstance(await world.edit(approval, SENIOR, amount=400), service.Stale)


async def test_two_reviewers_editing_at_once_settle_once(world: World) -> None:
    approval = await world.submit()
    results = await asyncio.gather(
        world.edit(approval, JUNIOR, amount=400), world.edit(approval, SENIOR, amount=300)
    )
    settled = [r for r in results if isinstance(r, service.Settled)]
    assert len(settled) == 1
    other = next(r for r in results if r is not settled[0])
    assert isinstance(other, service.Stale | service.EditRefused)
    current = await world.service.get(approval.approval_id)
    assert current.edit is not None
    assert current.edit.number == 1
    assert current.edit == settled[0].approval.edit
    kinds = [i.kind for i in await world.store.claim_outbox(FAR, FAR, 1000)]
    assert kinds.count(models.OutboxKind.CALLBACK) == 1


async def test_a_form_opened_before_another_edit_is_refused(world: World) -> None:
    approval = await world.submit(amount=20000)
    first = await world.edit(approval, SENIOR, amount=15000)
    assert isinstance(first, service.Voted)
    late = await world.edit(approval, SENIOR2, amount=12000)  # seen: the requested version
    assert isinstance(late, service.EditRefused)
    assert late.problems[0].message == service.EDITED_MEANWHILE
    assert (await world.service.get(approval.approval_id)).edit == first.approval.edit


async def test_only_the_edited_arguments_may_be_claimed(world: World) -> None:
    approval = await world.submit(amount=900)
    result = await world.edit(approval, JUNIOR, amount=90)
    assert isinstance(result, service.Settled)
    edited = result.approval.run_sha256
    for given in (None, approval.arguments_sha256, "0" * 64):
        with pytest.raises(errors.NotTheseArguments):
            await world.service.claim_execution(
                approval.approval_id, agent=AGENT, idempotency_key="k1", arguments_sha256=given
            )
    claimed = await world.service.claim_execution(
        approval.approval_id, agent=AGENT, idempotency_key="k1", arguments_sha256=edited
    )
    assert claimed.execution is not None


async def test_an_unedited_call_claimed_with_another_hash_is_refused(world: World) -> None:
    approval = await world.submit()
    await world.service.click(
        approval.approval_id, action="approve", slack_user_id="U0JUNIOR", directory=DIRECTORY
    )
    with pytest.raises(errors.NotTheseArguments):
        await world.service.claim_execution(
            approval.approval_id, agent=AGENT, idempotency_key="k", arguments_sha256="1" * 64
        )
    claimed = await world.service.claim_execution(  # naming none, as before edits existed
        approval.approval_id, agent=AGENT, idempotency_key="k"
    )
    assert claimed.execution is not None


async def test_an_edit_is_an_audit_event_sealed_and_exported(world: World) -> None:
    approval = await world.submit(amount=900)
    result = await world.edit(approval, JUNIOR, amount=90)
    assert isinstance(result, service.Settled)
    edit = result.approval.edit
    assert edit is not None
    events = await reads.audit_events(world.store, T0 - timedelta(days=1))
    [event] = [e for e in events if e.kind == "edit"]
    assert event.approval_id == approval.approval_id
    assert event.data["requested_sha256"] == approval.arguments_sha256
    assert event.data["arguments_sha256"] == edit.arguments_sha256
    assert event.data["patch"] == [{"op": "replace", "path": "/amount", "value": 90}]
    edited_by = event.data["edited_by"]
    assert isinstance(edited_by, dict)
    assert edited_by["slack_user_id"] == "U0JUNIOR"
    seal = await world.store.audit.seal(T0 + timedelta(minutes=1), wait=True)
    assert seal is not None
    assert any(e.kind == "edit" for e in seal.events)
    report = await world.store.audit.verify()
    assert report.ok, report.problems


async def test_every_edit_result_is_refused_when_the_editable_list_is_empty(world: World) -> None:
    world.policy = policy.Policy.model_validate(
        make_policy().model_dump(mode="json", exclude_none=True)
        | {"rules": [{"tool": "*", "require": "junior"}]}
    )
    approval = await world.submit()
    assert approval.editable == ()
    result = await world.edit(approval, SENIOR, amount=400)
    assert isinstance(result, service.EditRefused)
    assert [p.forged for p in result.problems] == [True]
    assert edits.editable_fields(approval.tool.arguments, approval.editable) == []


async def test_a_note_that_cannot_be_stored_changes_nothing(world: World) -> None:
    approval = await world.submit()
    result = await world.service.edit(
        approval.approval_id,
        slack_user_id=JUNIOR.slack_user_id,
        changes={"amount": 400},
        directory=DIRECTORY,
        note="ok\x00",
        seen=approval.run_sha256,
    )
    assert isinstance(result, service.EditRefused)
    assert [p.message for p in result.problems] == ["the note contains NUL, which cannot be stored"]
    await world.unchanged(approval)


async def test_an_edit_keeps_a_double_beyond_the_safe_integers_untouched(world: World) -> None:
    # 1e16 came as a double and is stored as its RFC 8785 digits; read back, it is that double
    # again (as an int it would not be canonical), so the call stays editable
    approval = await world.submit(amount=900, reference=1e16)
    result = await world.edit(approval, JUNIOR, amount=90)
    assert isinstance(result, service.Settled)
    edit = result.approval.edit
    assert edit is not None
    assert edit.arguments["reference"] == 1e16
    assert '"reference":10000000000000000' in edit.arguments_jcs


async def test_an_edited_call_is_claimable_within_the_edited_rules_window(world: World) -> None:
    # the edit moves the call to a rule whose valid_for is shorter: its window is that one
    data = world.policy.model_dump(mode="json", by_alias=True, exclude_none=True)
    data["rules"][1]["valid_for"] = 60
    data["rules"].insert(
        1,
        {
            "tool": "transfer_*",
            "when": {"field": "arguments.amount", "gt": 5000},
            "require": ["junior", "senior"],
            "editable": ["amount"],
        },
    )
    world.policy = policy.Policy.model_validate(data)
    approval = await world.submit(amount=6000)
    assert approval.valid_for == 900
    result = await world.edit(approval, SENIOR, amount=90)
    assert isinstance(result, service.Settled)
    assert result.approval.valid_for == 60
    world.clock.advance(61)
    with pytest.raises(errors.DecisionLapsed):
        await world.service.claim_execution(
            approval.approval_id,
            agent=AGENT,
            idempotency_key="k",
            arguments_sha256=result.approval.run_sha256,
        )
