"""Loads the named queries of ``sql/queries.sql`` (``-- name: x`` headers)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

__all__ = ["migrations", "queries"]

SQL_DIR = Path(__file__).parent / "sql"
_HEADER = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


@cache
def queries() -> dict[str, str]:
    text = (SQL_DIR / "queries.sql").read_text("utf-8")
    parts = _HEADER.split(text)
    # parts = [preamble, name1, body1, name2, body2, ...]
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def migrations() -> list[tuple[int, str, str]]:
    """(version, name, sql) for every ``sql/migrations/NNNN_name.sql``, in version order."""
    found = []
    for entry in (SQL_DIR / "migrations").iterdir():
        match = re.fullmatch(r"(\d{4})_(\w+)\.sql", entry.name)
        if match:
            found.append((int(match[1]), match[2], entry.read_text("utf-8")))
    return sorted(found)
