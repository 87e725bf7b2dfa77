"""A call again with a reviewer's edit, on real PostgreSQL (approvals/call_again.py): the
model's next call with exactly the edited arguments is approved at once on the editor's
decision, once; anything else about it — one byte, another session, a claim first, a lapse, a
policy change — needs a human as usual."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import pytest

from approvals import errors, models, resource, service
from approvals.repository import Repository
from tests.integration.test_edits import AGENT, DIRECTORY, JUNIOR, SENIOR, World, make_policy
from tests.integration.test_service import FAR, T0, make_request
from tests.support import reads

S = models.Status
ARGUMENTS = {"amount": 900, "currency": "EUR", "memo": "invoice 42", "urgent": False}
EDITED = {**ARGUMENTS, "amount": 90}


@pytest.fixture
def world(store: Repository) -> World:
    return World(store)


async def edited(world: World, framework: str = "maf") -> models.Approval:
    """A call of ``framework`` approved by JUNIOR with its amount edited 900 → 90."""
    original = await call(world, "r1", ARGUMENTS, framework=framework)
    result = await world.edit(original, JUNIOR, amount=90)
    assert isinstance(result, service.Settled)
    return result.approval


async def outbox(world: World, approval_id: str) -> list[models.OutboxItem]:
    # a lease that ends when it starts leaves every row claimable again
    items = await world.store.claim_outbox(FAR, FAR, 1000)
    return [i for i in items if i.approval_id == approval_id]


async def call(
    world: World, request_id: str, arguments: dict[str, Any], **changes: Any
) -> models.Approval:
    body: dict[str, Any] = {"framework": "maf", **changes}
    tool = {"name": body.pop("tool_name", "transfer_money"), "call_id": request_id}
    request = make_request(request_id=request_id, tool={**tool, "arguments": arguments}, **body)
    approval, _ = await world.service.submit(AGENT, request)
    return approval


async def test_the_call_again_with_exactly_the_edit_is_approved_at_once(world: World) -> None:
    original = await edited(world)
    assert original.edit is not None
    world.clock.advance(30)
    again = await call(world, "r2", EDITED)
    assert again.status is S.APPROVED
    assert again.edit_of == original.approval_id
    assert again.arguments_sha256 == original.edit.arguments_sha256
    assert again.decided_at == T0 + timedelta(seconds=30)
    [decider] = again.decided_by
    assert (decider.slack_user_id, decider.arguments_sha256) == (
        JUNIOR.slack_user_id,
        original.edit.arguments_sha256,
    )
    stored = await world.service.get(again.approval_id)
    assert (stored.status, stored.edit_of) == (S.APPROVED, original.approval_id)
    assert stored.decided_by == again.decided_by
    # no card of its own: the original's is updated, the agent is called back
    kinds = [i.kind for i in await outbox(world, again.approval_id)]
    assert models.OutboxKind.POST_CARD not in kinds
    assert models.OutboxKind.CALLBACK in kinds
    [callback] = [
        i.work_as(models.Callback)
        for i in await outbox(world, again.approval_id)
        if i.kind is models.OutboxKind.CALLBACK
    ]
    body = json.loads(callback.body)
    assert (body["status"], body["edit_of"], body["edit"]) == (
        "approved",
        original.approval_id,
        None,
    )
    assert body["resume"]["approved"] is True
    # the original: its edit says which call runs it, and it can no longer be claimed
    now = await world.service.get(original.approval_id)
    assert now.called_again_as == again.approval_id
    assert json.loads(resource.render(now))["edit"]["called_again_as"] == again.approval_id
    with pytest.raises(errors.CalledAgain) as refused:
        await world.service.claim_execution(
            original.approval_id,
            agent=AGENT,
            idempotency_key="k-original",
            arguments_sha256=original.edit.arguments_sha256,
        )
    assert refused.value.approval_id == again.approval_id
    # the call again runs once, as any approval
    claimed = await world.service.claim_execution(
        again.approval_id, agent=AGENT, idempotency_key="k1"
    )
    assert claimed.execution is not None
    with pytest.raises(errors.AlreadyClaimed):
        await world.service.claim_execution(again.approval_id, agent=AGENT, idempotency_key="k2")


@pytest.mark.parametrize(
    ("what", "arguments", "changes"),
    [
        ("one byte off", {**EDITED, "memo": "invoice 42 "}, {}),
        ("the requested arguments", ARGUMENTS, {}),
        ("an argument added", {**EDITED, "reference": "x"}, {}),
        ("an argument left out", {k: v for k, v in EDITED.items() if k != "urgent"}, {}),
        ("another amount", {**EDITED, "amount": 91}, {}),
        ("another session", EDITED, {"session_id": "thread-2"}),
        ("another tool of the same rule", EDITED, {"tool_name": "transfer_funds"}),
        ("another requester", EDITED, {"requester": {"slack_user_id": "U0OTHER", "name": "O"}}),
        ("another context", EDITED, {"context": {"environment": "staging"}}),
    ],
)
async def test_anything_but_exactly_the_edited_call_needs_a_human(
    world: World, what: str, arguments: dict[str, Any], changes: dict[str, Any]
) -> None:
    original = await edited(world)
    other = await call(world, "r2", arguments, **changes)
    assert other.status is S.PENDING, what
    assert other.edit_of is None
    assert models.OutboxKind.POST_CARD in [i.kind for i in await outbox(world, other.approval_id)]
    assert (await world.service.get(original.approval_id)).called_again_as is None
    # and the original may still run, as edited
    assert original.edit is not None
    claimed = await world.service.claim_execution(
        original.approval_id,
        agent=AGENT,
        idempotency_key="k",
        arguments_sha256=original.edit.arguments_sha256,
    )
    assert claimed.execution is not None


async def test_another_agent_cannot_use_the_edit(world: World) -> None:
    world.policy = make_policy()
    data = world.policy.model_dump(mode="json", by_alias=True, exclude_none=True)
    data["agents"]["ops-bot"] = {"token_env": "OPS_BOT_TOKEN"}
    world.policy = type(world.policy).model_validate(data)
    original = await edited(world)
    request = make_request(
        request_id="r2",
        framework="maf",
        tool={"name": "transfer_money", "call_id": "r2", "arguments": EDITED},
        callback_url=None,
    )
    other, _ = await world.service.submit("ops-bot", request)
    assert (other.status, other.edit_of) == (S.PENDING, None)
    assert (await world.service.get(original.approval_id)).called_again_as is None


async def test_an_edit_is_called_again_once(world: World) -> None:
    original = await edited(world)
    first, second = await asyncio.gather(call(world, "r2", EDITED), call(world, "r3", EDITED))
    assert sorted([first.status, second.status]) == [S.APPROVED, S.PENDING]
    assert [a.edit_of for a in (first, second) if a.status is S.APPROVED] == [original.approval_id]
    # and a third, later, needs a human too
    third = await call(world, "r4", EDITED)
    assert third.status is S.PENDING


async def test_a_repeated_call_again_request_is_the_same_approval(world: World) -> None:
    await edited(world)
    first = await call(world, "r2", EDITED)
    again, created = await world.service.submit(
        AGENT,
        make_request(
            request_id="r2",
            framework="maf",
            tool={"name": "transfer_money", "call_id": "r2", "arguments": EDITED},
        ),
    )
    assert (created, again.approval_id, again.status) == (False, first.approval_id, S.APPROVED)


@pytest.mark.parametrize("rounds", [12])
async def test_a_claim_and_a_call_again_never_both_take_the_edit(world: World, rounds: int) -> None:
    """The original's row lock serializes them: whichever comes second is refused (the claim)
    or goes to a human (the call again), whatever the interleaving."""
    for n in range(rounds):
        session = f"s{n}"
        original = await call(world, f"o{n}", ARGUMENTS, session_id=session)
        result = await world.edit(original, JUNIOR, amount=90)
        assert isinstance(result, service.Settled)
        assert result.approval.edit is not None

        async def claim(o: models.Approval = result.approval, key: str = f"k{n}") -> bool:
            assert o.edit is not None
            try:
                await world.service.claim_execution(
                    o.approval_id,
                    agent=AGENT,
                    idempotency_key=key,
                    arguments_sha256=o.edit.arguments_sha256,
                )
            except (errors.CalledAgain, errors.AlreadyClaimed):
                return False
            return True

        claimed, again = await asyncio.gather(
            claim(), call(world, f"a{n}", EDITED, session_id=session)
        )
        assert claimed != (again.status is S.APPROVED), n


async def test_a_claimed_original_is_not_called_again(world: World) -> None:
    original = await edited(world)
    assert original.edit is not None
    await world.service.claim_execution(
        original.approval_id,
        agent=AGENT,
        idempotency_key="k",
        arguments_sha256=original.edit.arguments_sha256,
    )
    again = await call(world, "r2", EDITED)
    assert (again.status, again.edit_of) == (S.PENDING, None)


async def test_a_lapsed_edit_is_not_called_again(world: World) -> None:
    original = await edited(world)
    world.clock.advance(original.valid_for + 1)
    again = await call(world, "r2", EDITED)
    assert again.status is S.PENDING


async def test_a_policy_that_now_routes_the_call_elsewhere_needs_a_human(world: World) -> None:
    original = await edited(world)
    data = world.policy.model_dump(mode="json", by_alias=True, exclude_none=True)
    data["rules"][1]["require"] = "senior"  # the same rule now needs another role
    world.policy = type(world.policy).model_validate(data)
    again = await call(world, "r2", EDITED)
    assert again.status is S.PENDING
    assert again.required.role == "senior"
    assert (await world.service.get(original.approval_id)).called_again_as is None


async def test_an_approval_without_an_edit_is_never_called_again(world: World) -> None:
    plain = await call(world, "r1", EDITED)
    await world.service.click(
        plain.approval_id, action="approve", slack_user_id=SENIOR.slack_user_id, directory=DIRECTORY
    )
    # approved without an edit: the same arguments again are a new call for a human
    again = await call(world, "r2", EDITED)
    assert again.status is S.PENDING


async def test_the_call_again_is_an_audit_event_naming_the_original(world: World) -> None:
    original = await edited(world)
    again = await call(world, "r2", EDITED)
    events = await reads.audit_events(world.store, T0 - timedelta(days=1))
    created = {e.approval_id: e for e in events if e.kind == "created"}
    assert created[again.approval_id].data["edit_of"] == original.approval_id
    assert "edit_of" not in created[original.approval_id].data  # as sealed before edits existed
    [settled] = [e for e in events if e.kind == "settlement" and e.approval_id == again.approval_id]
    assert settled.data["status"] == "approved"
    seal = await world.store.audit.seal(FAR, wait=True)
    assert seal is not None
    report = await world.store.audit.verify()
    assert report.ok, report.problems


@pytest.mark.parametrize("framework", ["claude-code", "ag-ui", "maf", "openai-agents"])
async def test_where_the_framework_cannot_run_the_edit_the_original_is_refused(
    world: World, framework: str
) -> None:
    original = await edited(world, framework)
    decision = resource.resume(original)
    assert decision is not None
    text = json.dumps(decision)
    assert '{\\"amount\\":90,' in text  # the exact edited arguments, to call again with
    assert "allow" not in text
    assert "editedArgs" not in text


async def test_the_call_again_runs_by_the_original_deadline_never_later(world: World) -> None:
    original = await edited(world)
    assert original.valid_until is not None
    world.clock.advance(original.valid_for - 100)  # 100 s of the reviewer's window left
    again = await call(world, "r2", EDITED)
    assert again.status is S.APPROVED
    assert again.valid_until == original.valid_until
    world.clock.advance(101)
    with pytest.raises(errors.DecisionLapsed):
        await world.service.claim_execution(again.approval_id, agent=AGENT, idempotency_key="k")
