"""The Deny modal and its submission: pure rendering and parsing."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bot import interactions, rendering
from tests.unit.test_quorum import pending

PRESETS = ("Amount looks wrong", "Wrong recipient")


def submission(meta: str, typed: str | None, preset: str | None = None) -> dict[str, Any]:
    values: dict[str, Any] = {"reason": {"reason_input": {"value": typed}}}
    if preset is not None:
        values["preset"] = {"preset_select": {"selected_option": {"value": preset}}}
    return {
        "user": {"id": "U0APP"},
        "view": {"private_metadata": meta, "state": {"values": values}},
    }


def test_modal_carries_the_approval_id_and_presets() -> None:
    approval = pending(1).evolve(tool={"name": "<!channel>", "call_id": "c", "arguments": {}})
    view = rendering.deny_modal(approval, "C0REVIEWS", PRESETS)
    assert json.loads(view["private_metadata"]) == {
        "approval_id": approval.approval_id,
        "channel": "C0REVIEWS",
    }
    assert view["callback_id"] == interactions.DENY_VIEW
    assert "&lt;!channel&gt;" in json.dumps(view["blocks"])
    options = view["blocks"][1]["element"]["options"]
    assert [o["text"]["text"] for o in options] == list(PRESETS)


META = json.dumps({"approval_id": "apr_" + "0" * 24, "channel": "C0REVIEWS"})


@pytest.mark.parametrize(
    ("typed", "preset", "reason"),
    [
        ("too risky", None, "too risky"),
        ("  too risky \n", None, "too risky"),
        (None, "1", "Wrong recipient"),
        ("see ticket 9", "0", "Amount looks wrong: see ticket 9"),
        (None, "7", ""),  # a preset index that does not exist is ignored
        (None, "-1", ""),
        ("", None, ""),
        ("x" * 5000, None, "x" * 2000),
    ],
)
def test_reasons(typed: str | None, preset: str | None, reason: str) -> None:
    parsed = interactions.parse_deny_submission(submission(META, typed, preset), PRESETS)
    assert parsed.reason == reason
    assert parsed.approval_id == "apr_" + "0" * 24
    assert parsed.channel_id == "C0REVIEWS"


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"user": {"id": "U0APP"}},
        submission("not json", "x"),
        submission(json.dumps({"approval_id": "apr_../etc"}), "x"),
        submission(json.dumps(["apr_" + "0" * 24]), "x"),
    ],
)
def test_bad_submissions_raise(body: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"approval id|no user"):
        interactions.parse_deny_submission(body, PRESETS)
