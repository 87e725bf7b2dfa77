"""Loads the named queries of ``sql/queries.sql`` (``-- name: x`` headers)."""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

__all__ = ["migrations", "queries"]

_HEADER = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


@cache
def queries() -> dict[str, str]:
    text = resources.files("approvals").joinpath("sql/queries.sql").read_text("utf-8")
    parts = _HEADER.split(text)
    # parts = [preamble, name1, body1, name2, body2, ...]
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def migrations() -> list[tuple[int, str, str]]:
    """(version, name, sql) for every ``sql/migrations/NNNN_name.sql``, in version order."""
    folder = resources.files("approvals").joinpath("sql/migrations")
    found = []
    for entry in folder.iterdir():
        match = re.fullmatch(r"(\d{4})_(\w+)\.sql", entry.name)
        if match:
            found.append((int(match[1]), match[2], entry.read_text("utf-8")))
    return sorted(found)
