"""Single-use decisions over HTTP, against the real bot (aiohttp, PostgreSQL, the Slack stand-in):
an approved call is claimed once, within its window, and its outcome reaches the card."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.support import reads, waiting
from tests.support.harness import (
    CHANNEL,
    FINANCE,
    OTHER_AGENT_TOKEN,
    Harness,
)


async def approved(harness: Harness, **overrides: Any) -> dict[str, Any]:
    """A submitted approval, approved by an eligible click (its resource once settled)."""
    created = await harness.submit(**overrides)
    approval_id = created["approval_id"]
    await harness.card_ts(approval_id)
    assert await harness.click(FINANCE[0], approval_id) == 200
    status, body = await harness.call("GET", f"/v1/approvals/{approval_id}?wait=10")
    assert (status, body["status"]) == (200, "approved"), body
    return dict(body)


async def claim(harness: Harness, approval_id: str, key: str) -> tuple[int, Any]:
    return await harness.call(
        "POST", f"/v1/approvals/{approval_id}/execution", json_body={"idempotency_key": key}
    )


async def report(
    harness: Harness, approval_id: str, key: str, status: str = "ok", detail: str = ""
) -> tuple[int, Any]:
    body = {"idempotency_key": key, "status": status, "detail": detail}
    return await harness.call("POST", f"/v1/approvals/{approval_id}/outcome", json_body=body)


def card_text(harness: Harness, ts: str) -> str:
    return json.dumps(harness.standin.card(CHANNEL, ts)["blocks"], ensure_ascii=False)


async def test_the_first_claim_runs_a_retry_gets_it_back_and_any_other_is_refused(
    harness: Harness,
) -> None:
    decision = await approved(harness)
    approval_id = decision["approval_id"]
    assert decision["execution"] is None
    assert decision["valid_until"] is not None

    status, first = await claim(harness, approval_id, "worker-1/run-1")
    assert status == 200, first
    execution = first["execution"]
    assert execution["claim_id"].startswith("exc_")
    assert execution["outcome"] is None
    assert "idempotency_key" not in execution  # the caller's own secret is never shown
    # the bound fields to check before running, as in every answer
    assert first["arguments_sha256"] == decision["arguments_sha256"]
    assert first["tool"] == decision["tool"]

    # the same caller, its answer lost: its own claim back, not a second execution
    status, again = await claim(harness, approval_id, "worker-1/run-1")
    assert (status, again["execution"]) == (200, execution)

    # anyone else: refused, naming which claim holds it and since when
    status, refused = await claim(harness, approval_id, "worker-2/run-1")
    assert status == 409
    assert refused["error"]["code"] == "already_claimed"
    assert refused["error"]["claim"] == {
        "claim_id": execution["claim_id"],
        "claimed_at": execution["claimed_at"],
    }
    assert execution["claim_id"] in refused["error"]["message"]


async def test_any_printable_key_claims_and_reports_and_a_different_one_is_refused(
    harness: Harness,
) -> None:
    """Keys are text, not ASCII only: compared as UTF-8 bytes, never a 500."""
    approval_id = (await approved(harness))["approval_id"]
    status, first = await claim(harness, approval_id, "clé/ключ/🔑")
    assert status == 200, first
    status, again = await claim(harness, approval_id, "clé/ключ/🔑")
    assert (status, again["execution"]) == (200, first["execution"])
    status, refused = await claim(harness, approval_id, "cle/ключ/🔑")
    assert (status, refused["error"]["code"]) == (409, "already_claimed")
    status, body = await report(harness, approval_id, "ключ")
    assert (status, body["error"]["code"]) == (409, "not_claimed")
    status, body = await report(harness, approval_id, "clé/ключ/🔑")
    assert status == 200, body


async def test_the_deadlines_card_updates_are_skipped_once_the_approval_moved_past_them(
    harness: Harness,
) -> None:
    """Claimed in time and reported at once: the updates due at the lapse and at the outcome's
    deadline would show nothing new, and Slack is not asked for them."""
    approval_id = (await approved(harness))["approval_id"]
    ts = await harness.card_ts(approval_id)
    assert (await claim(harness, approval_id, "run-1"))[0] == 200
    assert (await report(harness, approval_id, "run-1"))[0] == 200
    await harness.standin.wait_for(lambda: "Ran at" in card_text(harness, ts))
    assert harness.store is not None

    async def drained() -> bool:
        assert harness.store is not None
        return await reads.outbox_counts(harness.store) == (0, 0)

    # the claim's and the report's updates may land in either order: count once both are done
    await harness.settle_quietly(1.0)
    updates = len(harness.standin.methods_called("chat.update"))
    harness.clock.advance(3600 + 2)  # past both deadlines
    await waiting.until(drained, what="the deadlines' rows taken and skipped")
    assert len(harness.standin.methods_called("chat.update")) == updates
    assert "Ran at" in card_text(harness, ts)


async def test_concurrent_claims_from_many_workers_give_exactly_one_execution(
    harness: Harness,
) -> None:
    approval_id = (await approved(harness))["approval_id"]
    answers = await asyncio.gather(*(claim(harness, approval_id, f"worker-{n}") for n in range(20)))
    statuses = sorted(status for status, _ in answers)
    assert statuses == [200] + [409] * 19
    codes = {body["error"]["code"] for status, body in answers if status == 409}
    assert codes == {"already_claimed"}
    assert harness.store is not None
    stored = await harness.store.get_approval(approval_id)
    assert stored is not None
    assert stored.execution is not None


async def test_only_an_approved_call_may_be_claimed(harness: Harness) -> None:
    pending = (await harness.submit())["approval_id"]
    status, body = await claim(harness, pending, "k")
    assert (status, body["error"]["code"], body["error"]["status"]) == (
        409,
        "not_approved",
        "pending",
    )
    denied = (await harness.submit(request_id="r-denied"))["approval_id"]
    await harness.card_ts(denied)
    assert await harness.click(FINANCE[0], denied, "countersign_deny", reason="no") == 200
    await harness.call("GET", f"/v1/approvals/{denied}?wait=10")
    status, body = await claim(harness, denied, "k")
    assert (status, body["error"]["code"], body["error"]["status"]) == (
        409,
        "not_approved",
        "denied",
    )
    # another agent's approval does not exist for it
    status, body = await harness.call(
        "POST",
        f"/v1/approvals/{pending}/execution",
        json_body={"idempotency_key": "k"},
        token=OTHER_AGENT_TOKEN,
    )
    assert (status, body["error"]["code"]) == (404, "not_found")


async def test_a_claim_after_the_window_is_refused_and_the_card_says_it_lapsed(
    harness: Harness,
) -> None:
    decision = await approved(harness)
    approval_id = decision["approval_id"]
    ts = await harness.card_ts(approval_id)
    await harness.standin.wait_for(lambda: "may run it once, until" in card_text(harness, ts))

    harness.clock.advance(900 + 2)  # the rule's valid_for is the default, 900 s
    status, body = await claim(harness, approval_id, "late-worker")
    assert status == 409
    assert body["error"]["code"] == "decision_lapsed"
    assert body["error"]["valid_until"] == decision["valid_until"]
    # the card update queued for the deadline shows that it lapsed unclaimed
    await harness.standin.wait_for(lambda: "Not claimed to run by" in card_text(harness, ts))
    status, after = await harness.call("GET", f"/v1/approvals/{approval_id}")
    assert after["execution"] is None


async def test_the_outcome_is_stored_once_and_shown_on_the_card_escaped(
    harness: Harness,
) -> None:
    approval_id = (await approved(harness))["approval_id"]
    ts = await harness.card_ts(approval_id)
    assert (await claim(harness, approval_id, "run-1"))[0] == 200
    await harness.standin.wait_for(lambda: "no outcome reported yet" in card_text(harness, ts))

    # only the claimer reports
    status, body = await report(harness, approval_id, "someone-else")
    assert (status, body["error"]["code"]) == (409, "not_claimed")
    assert body["error"]["fields"][0]["field"] == "idempotency_key"

    detail = "paid <!channel> *bold* <https://evil.example|click>"
    status, body = await report(harness, approval_id, "run-1", "ok", detail)
    assert status == 200, body
    outcome = body["execution"]["outcome"]
    assert (outcome["status"], outcome["detail"]) == ("ok", detail)
    # the same report again (a lost answer): as stored; a different one: refused
    status, again = await report(harness, approval_id, "run-1", "ok", detail)
    assert (status, again["execution"]["outcome"]) == (200, outcome)
    status, other = await report(harness, approval_id, "run-1", "error", "it failed")
    assert (status, other["error"]["code"]) == (409, "outcome_already_reported")

    await harness.standin.wait_for(lambda: "Ran at" in card_text(harness, ts))
    text = card_text(harness, ts)
    assert "by sales-bot: ok" in text
    assert "<!channel>" not in text
    assert "<https://" not in text
    assert "&lt;!channel&gt;" in text

    # the audit holds the claim and the outcome beside the approval's other events
    assert harness.store is not None
    stored = await harness.store.get_approval(approval_id)
    assert stored is not None
    events = await reads.audit_events(harness.store, stored.created_at)
    kinds = [e.kind for e in events if e.approval_id == approval_id]
    assert kinds[0] == "created"
    assert (kinds.count("execution"), kinds.count("outcome")) == (1, 1)
    status, trail = await harness.call("GET", f"/v1/approvals/{approval_id}/events")
    assert [e["kind"] for e in trail["events"]][-2:] == ["execution", "outcome"]
    [reported] = [e for e in events if e.kind == "outcome"]
    assert reported.data == {
        "claim_id": body["execution"]["claim_id"],
        "outcome": "ok",
        "detail": detail,
    }


async def test_a_claim_with_no_outcome_in_time_shows_so_on_the_card(harness: Harness) -> None:
    approval_id = (await approved(harness))["approval_id"]
    ts = await harness.card_ts(approval_id)
    assert (await claim(harness, approval_id, "run-1"))[0] == 200
    harness.clock.advance(3600 + 2)  # the rule's report_within is the default, an hour
    await harness.standin.wait_for(lambda: "no outcome reported:" in card_text(harness, ts))


async def test_bad_bodies_are_422_naming_the_field(harness: Harness) -> None:
    approval_id = (await approved(harness))["approval_id"]
    path = f"/v1/approvals/{approval_id}"
    cases = [
        ("execution", {}, "idempotency_key"),
        ("execution", {"idempotency_key": ""}, "idempotency_key"),
        ("execution", {"idempotency_key": "a\nb"}, "idempotency_key"),
        ("execution", {"idempotency_key": "k" * 201}, "idempotency_key"),
        ("execution", {"idempotency_key": 7}, "idempotency_key"),
        ("execution", {"idempotency_key": "k", "run": True}, "run"),
        ("outcome", {"idempotency_key": "k", "status": "maybe"}, "status"),
        ("outcome", {"idempotency_key": "k", "status": "ok", "detail": "x" * 501}, "detail"),
        ("outcome", {"idempotency_key": "k"}, "status"),
    ]
    for route, body, field in cases:
        status, answer = await harness.call("POST", f"{path}/{route}", json_body=body)
        assert status == 422, (route, body, answer)
        assert field in [f["field"] for f in answer["error"]["fields"]], (route, body, answer)
    # nothing was claimed by any of them
    status, current = await harness.call("GET", path)
    assert current["execution"] is None
