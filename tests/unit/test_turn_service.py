"""The turn service's pure parts; what it stores and replays is tested on PostgreSQL in
tests/integration/test_turn_service.py."""

from __future__ import annotations

from typing import Any

from approvals import models
from approvals.turn_service import turn_fingerprint


def turn(n: int = 1, **changes: Any) -> models.TurnRequest:
    body: dict[str, Any] = {
        "session_id": "wa-1",
        "request_id": f"turn-{n}",
        "channel": "whatsapp",
        "lead": {"id": "lena@prospect.example"},
        "operator": {"slack_user_id": "U0OMAR"},
        "funnel": {"stage": "qualified"},
        "tool": {"name": "book_call", "call_id": f"call-{n}", "arguments": {}},
    }
    body.update(changes)
    return models.TurnRequest.model_validate(body)


def test_the_fingerprint_is_of_the_validated_body() -> None:
    assert turn_fingerprint(turn(1)) == turn_fingerprint(turn(1, request_id=" turn-1 "))
    assert turn_fingerprint(turn(1)) != turn_fingerprint(turn(1, summary="other"))
