"""Only your own people decide: a click from a user of another organisation (a Slack Connect
channel: their workspace is not this installation's, nor of its Enterprise Grid) or from a guest
account never counts unless the role says ``guests: true``, whatever users or user groups list
them; the clicker is told why and the attempt is recorded. Real clicks, signed as Slack signs
them, against the Slack stand-in's ``users.info`` and ``auth.test``."""

from __future__ import annotations

from pathlib import Path

from bot.sandbox.standin import SlackUser
from tests.support import harness as support
from tests.support.harness import FINANCE, Harness

PARTNER = SlackUser(id="U0PART", name="paz", email="paz@partner.example", team_id="T0PARTNER")
GUEST = SlackUser(id="U0GUEST", name="gus", email="gus@example.com", is_restricted=True)
SINGLE = SlackUser(id="U0SINGLE", name="sil", email="sil@example.com", is_ultra_restricted=True)
SISTER = SlackUser(
    id="U0SIS", name="sia", email="sia@example.com", team_id="T0SISTER", enterprise_id="E0ORG"
)


def _join_finance(harness: Harness, *users: SlackUser) -> None:
    """``users`` known to Slack and members of the finance user group (which the test policy's
    rule requires): by membership alone, each would count."""
    for user in users:
        harness.standin.users[user.id] = user
        harness.standin.usergroups["S0FINANCE"].append(user.id)


async def _outcomes(harness: Harness, approval_id: str) -> list[str]:
    assert harness.store is not None
    return [a.outcome.value for a in await harness.store.attempts(approval_id)]


async def test_another_organisation_and_guests_never_count(harness: Harness) -> None:
    _join_finance(harness, PARTNER, GUEST, SINGLE)
    approval_id = (await harness.submit())["approval_id"]
    await harness.card_ts(approval_id)
    expected = [
        (
            PARTNER,
            "your account belongs to another organisation (T0PARTNER): only this workspace's "
            "members decide for the role 'finance'",
        ),
        (GUEST, "guest accounts do not decide for the role 'finance'"),
        (SINGLE, "guest accounts do not decide for the role 'finance'"),
    ]
    for user, reason in expected:
        assert await harness.click(user, approval_id) == 200
        [why] = await harness.wait_ephemeral(user)
        assert reason in why
    assert (await harness.approval(approval_id))["status"] == "pending"
    # the control: a member of this workspace in the same group counts
    assert await harness.click(FINANCE[0], approval_id) == 200
    [delivered] = await harness.receiver.wait_delivered(1)
    assert b'"status":"approved"' in delivered.body.replace(b" ", b"")
    assert await _outcomes(harness, approval_id) == [
        "outside_organisation",
        "guest",
        "guest",
        "accepted",
    ]
    # the refusals are in the approval's events, as every attempt is, with who and why
    status, events = await harness.call("GET", f"/v1/approvals/{approval_id}/events")
    assert status == 200, events
    refused = [e for e in events["events"] if e["kind"] == "attempt"][:3]
    assert [(e["slack_user_id"], e["outcome"]) for e in refused] == [
        (PARTNER.id, "outside_organisation"),
        (GUEST.id, "guest"),
        (SINGLE.id, "guest"),
    ]


async def test_another_workspace_of_the_same_enterprise_is_your_own(harness: Harness) -> None:
    """On Enterprise Grid, a sister workspace's member is of this organisation; a user of
    another organisation still is not."""
    harness.standin.enterprise_id = "E0ORG"
    _join_finance(harness, SISTER, PARTNER)
    approval_id = (await harness.submit())["approval_id"]
    await harness.card_ts(approval_id)
    assert await harness.click(PARTNER, approval_id) == 200
    [why] = await harness.wait_ephemeral(PARTNER)
    assert "another organisation (T0PARTNER)" in why
    assert await harness.click(SISTER, approval_id) == 200
    await harness.receiver.wait_delivered(1)
    assert await _outcomes(harness, approval_id) == ["outside_organisation", "accepted"]


async def test_a_role_that_admits_guests_counts_them(database_url: str, tmp_path: Path) -> None:
    harness = Harness(database_url=database_url, policy_file=tmp_path / "countersign.yml")
    await harness.start()
    try:
        data = support.test_policy(harness.receiver.port).model_dump(
            mode="json", by_alias=True, exclude_none=True
        )
        data["roles"]["finance"]["guests"] = True
        harness.write_policy(data)
        await harness.stop_bot()
        await harness.start_bot()
        _join_finance(harness, GUEST)
        approval_id = (await harness.submit())["approval_id"]
        await harness.card_ts(approval_id)
        assert await harness.click(GUEST, approval_id) == 200
        await harness.receiver.wait_delivered(1)
        assert await _outcomes(harness, approval_id) == ["accepted"]
    finally:
        await harness.stop()


async def test_when_the_workspace_cannot_be_identified_the_click_is_refused(
    harness: Harness,
) -> None:
    """``auth.test`` failing: whose organisation the clicker is of is unknown, so nothing
    counts (fail closed); once Slack answers again, the click counts."""
    approval_id = (await harness.submit())["approval_id"]
    await harness.card_ts(approval_id)
    # a first click whose profile cannot be fetched: Bolt's own auth.test is made (and kept),
    # the bot's is not yet
    harness.standin.fail("users.info", status=200, error="user_not_found")
    assert await harness.click(FINANCE[0], approval_id) == 200
    [first] = await harness.wait_ephemeral(FINANCE[0])
    assert "could not be checked (user_not_found)" in first
    harness.standin.fail("auth.test", status=200, error="fatal_error")
    assert await harness.click(FINANCE[0], approval_id) == 200
    [_, why] = await harness.wait_ephemeral(FINANCE[0], 2)
    assert "could not be checked (fatal_error)" in why
    assert (await harness.approval(approval_id))["status"] == "pending"
    assert await harness.click(FINANCE[0], approval_id) == 200
    await harness.receiver.wait_delivered(1)
    assert await _outcomes(harness, approval_id) == ["lookup_failed", "lookup_failed", "accepted"]
