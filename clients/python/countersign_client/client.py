"""An async client for wire contract v1."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Literal

import aiohttp

from countersign_client import errors
from countersign_client.models import Approval

__all__ = ["CountersignClient"]

MAX_WAIT = 60  # the server's long-poll cap per request


class CountersignClient:
    """``async with CountersignClient(base_url, token) as cs: await cs.submit(...)``."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        session: aiohttp.ClientSession | None = None,
        timeout: float = 10.0,
    ) -> None:
        self._base = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"}
        self._session = session
        self._owns_session = session is None
        self._timeout = timeout

    async def __aenter__(self) -> CountersignClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session

    async def _call(
        self, method: str, path: str, *, json: Any = None, timeout: float | None = None
    ) -> Approval:
        return (await self._exchange(method, path, json=json, timeout=timeout))[1]

    async def _exchange(
        self, method: str, path: str, *, json: Any = None, timeout: float | None = None
    ) -> tuple[int, Approval]:
        """The answer's status and the approval resource it holds; a 4xx/5xx raises ApiError."""
        async with self._http().request(
            method,
            self._base + path,
            json=json,
            headers=self._headers,
            timeout=aiohttp.ClientTimeout(total=timeout or self._timeout),
        ) as response:
            body = await (
                response.json() if response.content_type == "application/json" else response.text()
            )
            if response.status >= 400:
                raise errors.from_response(response.status, body)
            return response.status, Approval.model_validate(body)

    async def submit(
        self,
        *,
        request_id: str,
        session_id: str,
        tool: str,
        call_id: str,
        arguments: dict[str, Any],
        requester: Mapping[str, str | None],
        summary: str = "",
        context: dict[str, Any] | None = None,
        callback_url: str | None = None,
        expires_in: int | None = None,
        framework: str = "generic",
    ) -> Approval:
        """Hand a pending tool call to Countersign. Idempotent: the same ids and content return
        the same approval; the same ids with other content raise Conflict."""
        body: dict[str, Any] = {
            "request_id": request_id,
            "session_id": session_id,
            "tool": {"name": tool, "call_id": call_id, "arguments": arguments},
            "requester": {k: v for k, v in requester.items() if v is not None},
            "summary": summary,
            "context": context or {},
            "framework": framework,
        }
        if callback_url is not None:
            body["callback_url"] = callback_url
        if expires_in is not None:
            body["expires_in"] = expires_in
        approval, _ = await self.submit_body(body)
        return approval

    async def submit_body(self, body: Mapping[str, Any]) -> tuple[Approval, bool]:
        """:meth:`submit` with the request body as the HTTP API's ``POST /v1/approvals`` takes
        it; also says whether this submission created the approval (201) or found the one its
        ids already name (200)."""
        status, approval = await self._exchange("POST", "/v1/approvals", json=body)
        return approval, status == 201

    async def get(self, approval_id: str) -> Approval:
        return await self._call("GET", f"/v1/approvals/{approval_id}")

    async def wait(self, approval_id: str, timeout: float) -> Approval:
        """Long-poll until the approval settles or ``timeout`` seconds pass (then it is returned
        still pending). A dropped connection or a server restart is retried until the deadline.
        """
        deadline = time.monotonic() + timeout
        pause = 0.2
        while True:
            remaining = deadline - time.monotonic()
            # fractions count: truncating 0.9 s to 0 would return at once, still pending
            wait = max(0.0, min(float(MAX_WAIT), remaining))
            try:
                approval = await self._call(
                    "GET",
                    f"/v1/approvals/{approval_id}?wait={wait:.3f}",
                    timeout=wait + self._timeout,
                )
            except (aiohttp.ClientError, TimeoutError):
                if time.monotonic() + pause >= deadline:
                    raise
                await asyncio.sleep(pause)
                pause = min(pause * 2, 5.0)
                continue
            pause = 0.2
            if approval.settled or time.monotonic() >= deadline or wait <= 0:
                return approval

    async def cancel(self, approval_id: str, reason: str | None = None) -> Approval:
        body = {"reason": reason} if reason else None
        return await self._call("POST", f"/v1/approvals/{approval_id}/cancel", json=body)

    async def claim(
        self, approval_id: str, idempotency_key: str, arguments_sha256: str | None = None
    ) -> Approval:
        """Claim the one execution an approved call allows; run the call only after a 200.

        ``arguments_sha256``: the hash of the arguments about to run (needed once a reviewer
        edited the call: only the edited arguments may run). The same ``idempotency_key`` again
        (a retry after a lost answer) returns the same claim, never a second one. Raises
        AlreadyClaimed (another key holds it: do not run), NotApproved, DecisionLapsed (past
        ``valid_until``: not executed; ask again) or NotTheseArguments.
        """
        body = {"idempotency_key": idempotency_key}
        if arguments_sha256 is not None:
            body["arguments_sha256"] = arguments_sha256
        return await self._call("POST", f"/v1/approvals/{approval_id}/execution", json=body)

    async def report_outcome(
        self,
        approval_id: str,
        idempotency_key: str,
        status: Literal["ok", "error"],
        detail: str = "",
    ) -> Approval:
        """Report what happened after the claimed call ran (``idempotency_key``: the claim's).

        The same report again returns the stored one. Raises NotClaimed (no claim under that
        key) or OutcomeAlreadyReported (another outcome is stored already).
        """
        body = {"idempotency_key": idempotency_key, "status": status, "detail": detail}
        return await self._call("POST", f"/v1/approvals/{approval_id}/outcome", json=body)
