"""Delivers a settled approval to the agent's ``callback_url``, signed: the relay's handler of
:class:`~approvals.models.Callback` work, which names the URL, the body and the agent whose
secret signs it.

``Countersign-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`` and
``Idempotency-Key: <approval_id>``. The body was frozen at settlement, so every redelivery sends
the same bytes with the same key. tenacity makes a few quick tries inside one attempt (a blip);
longer outages are the relay's durable backoff, honouring ``Retry-After``.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections.abc import Callable, Mapping

import aiohttp
from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from approvals import errors, models, policy

__all__ = ["CallbackSender", "signature_header"]

log = logging.getLogger(__name__)


def signature_header(secret: str, body: bytes, timestamp: int) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


class _Transient(errors.DeliveryFailed):
    """Worth a quick retry within this attempt (connection error, 5xx, 429)."""


class CallbackSender:
    def __init__(
        self,
        *,
        session: aiohttp.ClientSession,
        secrets: Callable[[], Mapping[str, str | None]],
        policy: Callable[[], policy.Policy],
        quick_tries: int = 3,
        timeout: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._session = session
        self._secrets = secrets
        self._policy = policy
        self._quick_tries = quick_tries
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._clock = clock

    async def __call__(self, item: models.OutboxItem) -> None:
        callback = item.work_as(models.Callback)
        url, body, agent = callback.url, callback.body.encode(), callback.agent
        secret = self._secrets().get(agent)
        agent_policy = self._policy().agents.get(agent)
        if secret is None or agent_policy is None:
            raise errors.DeliveryFailed(f"agent {agent!r} has no callback secret configured")
        # Checked again at send time: the allow-list may have shrunk since the request came.
        if not policy.callback_allowed(url, agent_policy.callback_hosts):
            raise errors.DeliveryFailed("callback host is no longer on the agent's allow-list")
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self._quick_tries),
            wait=wait_exponential(multiplier=0.2, max=2),
            retry=retry_if_exception_type(_Transient),
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                await self._post(url, body, secret, item.approval_id)
        log.info(
            "callback delivered", extra={"action": "callback", "approval_id": item.approval_id}
        )

    async def _post(self, url: str, body: bytes, secret: str, approval_id: str) -> None:
        headers = {
            "Content-Type": "application/json",
            "Countersign-Signature": signature_header(secret, body, int(self._clock())),
            "Idempotency-Key": approval_id,
            "User-Agent": "countersign/0.1",
        }
        try:
            async with self._session.post(
                url, data=body, headers=headers, timeout=self._timeout, allow_redirects=False
            ) as response:
                if 200 <= response.status < 300:
                    return
                retry_after = response.headers.get("Retry-After")
                message = f"callback answered HTTP {response.status}"
                wait = float(retry_after) if retry_after and retry_after.isdigit() else None
                if wait is None and (response.status == 429 or response.status >= 500):
                    raise _Transient(message)
                # the far side said when to come back: leave that to the durable backoff
                raise errors.DeliveryFailed(message, retry_after=wait)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _Transient(f"callback unreachable: {type(exc).__name__}: {exc}") from exc
