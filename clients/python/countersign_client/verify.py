"""Verifies Countersign's signed callbacks: HMAC-SHA256 over ``"<t>.<body>"``, constant-time,
a timestamp tolerance against replays of old bodies, and refusal of an Idempotency-Key seen
before (the server delivers at least once)."""

from __future__ import annotations

import hashlib
import hmac
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping

from countersign_client.errors import DuplicateDelivery, SignatureError
from countersign_client.models import Approval

__all__ = ["CallbackVerifier"]


class CallbackVerifier:
    def __init__(
        self,
        secret: str | bytes,
        *,
        tolerance: int = 300,
        remember: int = 10_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._secret = secret.encode() if isinstance(secret, str) else secret
        self._tolerance = tolerance
        self._remember = remember
        self._clock = clock
        self._seen: OrderedDict[str, None] = OrderedDict()

    def verify(self, body: bytes, headers: Mapping[str, str]) -> Approval:
        """The decision in ``body``; raises SignatureError, or DuplicateDelivery (answer 2xx)."""
        lowered = {k.lower(): v for k, v in headers.items()}
        header = lowered.get("countersign-signature", "")
        try:
            fields = dict(part.split("=", 1) for part in header.split(","))
            timestamp = int(fields["t"])
            signature = fields["v1"]
        except (KeyError, ValueError):
            raise SignatureError("missing or malformed Countersign-Signature") from None
        if abs(self._clock() - timestamp) > self._tolerance:
            raise SignatureError("Countersign-Signature timestamp outside the tolerance")
        expected = hmac.new(self._secret, f"{timestamp}.".encode() + body, hashlib.sha256)
        if not hmac.compare_digest(expected.hexdigest(), signature):
            raise SignatureError("Countersign-Signature does not match the body")
        decision = Approval.model_validate_json(body)
        key = lowered.get("idempotency-key", "")
        if key != decision.approval_id:
            raise SignatureError("Idempotency-Key does not name the approval in the body")
        if key in self._seen:
            raise DuplicateDelivery(f"{key} was delivered before")
        self._seen[key] = None
        while len(self._seen) > self._remember:
            self._seen.popitem(last=False)
        return decision
