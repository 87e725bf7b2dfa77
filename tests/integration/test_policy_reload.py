"""The policy reloads without a restart; an invalid file is refused; pending approvals keep
the rule they were created under."""

from __future__ import annotations

from typing import Any

from bot import app as bot_app
from tests.support import waiting
from tests.support.harness import FINANCE, Harness
from tests.support.harness import test_policy as policy_v1


def policy_v2(port: int) -> dict[str, Any]:
    data = policy_v1(port).model_dump(mode="json", exclude_none=True)
    data["rules"] = [{"tool": "transfer_*", "require": "approvers", "approvals": 2}] + [
        r for r in data["rules"] if r["tool"] != "transfer_*"
    ]
    return data


async def test_reload_while_an_approval_is_pending(live: Harness) -> None:
    before = await live.submit(request_id="before")
    assert before["required"] == {"role": "finance", "approvals": 1}
    version = before["policy_version"]

    live.write_policy(policy_v2(live.receiver.port))

    probes = iter(range(1000))

    async def reloaded() -> bool:
        body = live.request_body(request_id=f"probe-{next(probes)}")
        _, probe = await live.call("POST", "/v1/approvals", json_body=body)
        return bool(probe["policy_version"] != version)

    await waiting.until(reloaded, what="the file change to be picked up")
    after = await live.submit(request_id="after")
    assert after["required"] == {"role": "approvers", "approvals": 2}
    assert after["policy_version"] != version

    # the approval made before the reload keeps its rule: finance, one approval
    _, still = await live.call("GET", f"/v1/approvals/{before['approval_id']}")
    assert (still["required"], still["policy_version"]) == (before["required"], version)
    await live.card_ts(before["approval_id"])
    await live.click(FINANCE[0], before["approval_id"])
    delivered = await live.receiver.wait_delivered(1)
    assert b'"approved"' in delivered[0].body


async def test_an_invalid_file_is_refused_and_the_old_policy_stays(live: Harness) -> None:
    version = (await live.submit(request_id="one"))["policy_version"]
    live.write_policy("rules: [this is: not valid\n")
    reload = live._runner.app[bot_app.LIVE].reload  # type: ignore[union-attr]
    assert reload() is False  # what SIGHUP does
    again = await live.submit(request_id="two")
    assert again["policy_version"] == version
    live.write_policy(policy_v2(live.receiver.port))
    assert reload() is True
    assert (await live.submit(request_id="three"))["policy_version"] != version
