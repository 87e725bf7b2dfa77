"""Running an approved call at most once: claim before it runs, report after.

An approval allows one execution, within its ``valid_until``. Every adapter runs a tool on an
approved decision like this::

    attempt = execution.Attempt(client, decision.approval_id)  # a key for this attempt only
    refused = await attempt.claim(pending)  # None: ours to run; else what to tell the model
    if refused is None:
        ...  # run the tool
        await attempt.report("ok")  # or ("error", "ValueError"): short, no arguments

The key is the approval id and a random part minted for this attempt, so a retry of a lost
answer (same key) gets its own claim back, while a second process, a duplicate resume or a late
worker (another key) is refused. A report that cannot be delivered is logged, never raised: a
lost answer to it must not make the tool run again.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from dataclasses import dataclass, field
from typing import Literal

import aiohttp

from countersign_client import errors
from countersign_client.binding import PendingCall, check_binding
from countersign_client.client import CountersignClient
from countersign_client.models import Approval

__all__ = [
    "ALREADY_EXECUTED",
    "LAPSED",
    "Attempt",
    "attempt_key",
    "error_detail",
    "refusal_text",
]

log = logging.getLogger(__name__)

ALREADY_EXECUTED = "Not executed here: this approved call was already executed elsewhere"
LAPSED = "Approval lapsed, not executed; ask again"
DETAIL_LIMIT = 200  # of the 500 the server keeps: an outcome line, not a log
TRIES = 3  # a dropped connection or a 5xx is retried with the same key (the same claim)
PAUSE = 0.2


def attempt_key(approval_id: str) -> str:
    """A claim key for one attempt to run ``approval_id`` (never reused by another attempt)."""
    return f"{approval_id}/{secrets.token_hex(12)}"


def refusal_text(refused: Exception) -> str:
    """What the model is told when a claim is refused: plainly, the call did not run here."""
    match refused:
        case errors.AlreadyClaimed():
            since = f" (claim {refused.claim_id}, {refused.claimed_at})" if refused.claim_id else ""
            return f"{ALREADY_EXECUTED}{since}. An approval runs at most once; do not run it again."
        case errors.DecisionLapsed():
            until = f" (it was valid until {refused.valid_until})" if refused.valid_until else ""
            return f"{LAPSED}{until}: submit the call again for a new decision."
        case errors.NotApproved():
            status = refused.approval_status or "not approved"
            return f"Not executed: Countersign says the approval is {status}."
        case errors.NotTheseArguments():
            return (
                "Not executed: a reviewer approved this call only with other arguments, which "
                "this run would not use."
            )
        case errors.CalledAgain():
            return (
                "Not executed: a reviewer approved this call only with changed arguments, and "
                "it was called again with them; that call runs them, not this one."
            )
        case errors.BindingMismatch():
            return f"Not executed: Countersign's claim is not bound to this call ({refused})."
        case errors.ApiError():
            return f"Not executed: Countersign refused the claim to run it ({refused.code})."
        case _:
            return (
                "Not executed: the claim to run it could not be made "
                f"({type(refused).__name__}); ask again."
            )


def _transient(exc: Exception) -> bool:
    if isinstance(exc, errors.ApiError):
        return exc.status >= 500
    return isinstance(exc, aiohttp.ClientError | TimeoutError)


@dataclass
class Attempt:
    """One attempt to run one approved call: its claim key, the claim, the report."""

    client: CountersignClient
    approval_id: str
    key: str = ""
    claimed: Approval | None = field(default=None, init=False)
    refusal: Exception | None = field(default=None, init=False)  # why the claim was refused
    reported: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.key = self.key or attempt_key(self.approval_id)

    async def claim(
        self,
        pending: PendingCall | None = None,
        tool_name: str | None = None,
        *,
        run_sha256: str | None = None,
    ) -> str | None:
        """Claim the execution: ``None`` when it is ours to run, else the text for the model.

        ``run_sha256``: the hash of the arguments about to run, named in the claim (a
        reviewer's edit's; None: the requested ones, as before edits existed). The claim's
        answer is checked against ``pending`` (and the tool's name, and that hash) like the
        decision was; one that is not bound to it is refused (and reported as not run).
        """
        try:
            claimed = await self._claim(run_sha256)
        except Exception as exc:  # refused, or unreachable after retries: fail closed
            self.refusal = exc
            log.warning(
                "claim refused: %s",
                exc,
                extra={"approval_id": self.approval_id, "code": getattr(exc, "code", None)},
            )
            return refusal_text(exc)
        try:
            if pending is not None:
                check_binding(claimed, pending)
            if tool_name is not None and claimed.tool.name != tool_name:
                raise errors.BindingMismatch("tool.name", tool_name, claimed.tool.name)
            if claimed.execution is None:
                raise errors.BindingMismatch("execution", "a claim", None)
            if run_sha256 is not None and claimed.run_sha256 != run_sha256:
                raise errors.BindingMismatch(
                    "edit.arguments_sha256", run_sha256, claimed.run_sha256
                )
        except errors.BindingMismatch as mismatch:
            log.error("claim answer refused: %s", mismatch, extra={"approval_id": self.approval_id})
            self.claimed, self.refusal = claimed, mismatch
            await self.report("error", "not run: the claim's answer was not bound to the call")
            return refusal_text(mismatch)
        self.claimed = claimed
        log.info(
            "execution claimed",
            extra={"approval_id": self.approval_id, "claim_id": claimed.execution.claim_id},
        )
        return None

    async def _claim(self, run_sha256: str | None) -> Approval:
        for attempt in range(TRIES):
            try:
                return await self.client.claim(self.approval_id, self.key, run_sha256)
            except Exception as exc:
                if not _transient(exc) or attempt == TRIES - 1:
                    raise
                await asyncio.sleep(PAUSE * 2**attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    async def report(self, status: Literal["ok", "error"], detail: str = "") -> None:
        """Report the outcome of the claimed run, once; failures are logged, never raised."""
        if self.claimed is None or self.reported:
            return
        self.reported = True
        detail = detail[:DETAIL_LIMIT]
        for attempt in range(TRIES):
            try:
                await self.client.report_outcome(self.approval_id, self.key, status, detail)
            except Exception as exc:
                if _transient(exc) and attempt < TRIES - 1:
                    await asyncio.sleep(PAUSE * 2**attempt)
                    continue
                log.warning(
                    "outcome not reported: %s",
                    exc,
                    extra={"approval_id": self.approval_id, "outcome": status},
                )
                return
            log.info("outcome reported", extra={"approval_id": self.approval_id, "outcome": status})
            return


def error_detail(exc: BaseException) -> str:
    """An outcome's detail for a tool that raised: the exception's type, never its text (it may
    hold the arguments or a secret)."""
    return f"raised {type(exc).__name__}"
