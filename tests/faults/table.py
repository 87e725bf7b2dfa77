"""The figures of each scenario, printed at the end of the run and written as Markdown to
``tests/faults/last-run.md``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["LAST_RUN", "RESULTS", "Row", "markdown", "record"]

LAST_RUN = Path(__file__).with_name("last-run.md")


@dataclass
class Row:
    scenario: str
    approvals: int = 0
    lost: int = 0  # 2xx-acked requests or settled decisions the agent never received
    doubled: int = 0  # approvals settled twice, or two different callback bodies under one key
    dup_keys: int = 0  # the same body delivered again under its key (allowed, counted)
    server_errors: int = 0  # 5xx answers to any client (a 503 with Retry-After excepted)
    recover_s: float | None = None  # from the fault's end to the last card / decision delivered
    took_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    def clean(self) -> bool:
        return self.lost == 0 and self.doubled == 0 and self.server_errors == 0


RESULTS: list[Row] = []


def record(row: Row) -> Row:
    RESULTS.append(row)
    return row


def markdown(rows: list[Row]) -> str:
    lines = [
        "| scenario | approvals | lost | doubled | dup keys | 5xx | recover s | took s | notes |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        recover = "–" if r.recover_s is None else f"{r.recover_s:.1f}"
        lines.append(
            f"| {r.scenario} | {r.approvals} | {r.lost} | {r.doubled} | {r.dup_keys} | "
            f"{r.server_errors} | {recover} | {r.took_s:.0f} | {'; '.join(r.notes)} |"
        )
    lines += [
        "",
        "lost: an approval acknowledged with a 2xx, or a decision settled, that never reached the "
        "agent's receiver (or an eligible click acknowledged 200 that never counted); doubled: "
        "an approval settled twice, or two different callback bodies under one "
        "`Idempotency-Key`; dup keys: the same body delivered again under its key (allowed); "
        "5xx: answers of 500 and above to the agent or to Slack, a 503 with `Retry-After` "
        "excepted; recover s: from the fault's end to the last card posted or decision "
        "delivered.",
    ]
    return "\n".join(lines) + "\n"
