"""Real PostgreSQL for the tests: ``TEST_DATABASE_URL`` if set, else an embedded one (pgserver).

One template database is migrated per run (per worker under pytest-xdist: a worker copying
it would stop another from dropping or creating it); each test gets a fresh database copied from
it, which takes milliseconds and leaves no state between tests.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from approvals import pg_db

# "gw0", "gw1"… under pytest-xdist (each worker process has its own template), unset otherwise
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
TEMPLATE = "countersign_template" + (f"_{WORKER}" if WORKER else "")


def with_database(dsn: str, name: str) -> str:
    """``dsn`` pointing at database ``name`` (socket DSNs keep their ``?host=``)."""
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path="/" + name))


@contextmanager
def server_dsn(env_url: str | None) -> Iterator[str]:
    if env_url:
        yield env_url
        return
    from bot.embedded_pg import embedded_postgres

    # a short path: the server's Unix socket lives under it (the limit is ~107 bytes)
    with (
        tempfile.TemporaryDirectory(prefix="cs-pg-") as tmp,
        embedded_postgres(Path(tmp) / "data") as dsn,
    ):
        yield dsn


async def create_template(admin_dsn: str) -> None:
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)")
        await conn.execute(f"CREATE DATABASE {TEMPLATE}")
    finally:
        await conn.close()
    await pg_db.migrate(with_database(admin_dsn, TEMPLATE))


async def fresh_database(admin_dsn: str) -> str:
    name = "cs_test_" + secrets.token_hex(6)
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
    finally:
        await conn.close()
    return with_database(admin_dsn, name)


async def drop_database(admin_dsn: str, dsn: str) -> None:
    name = urlsplit(dsn).path.lstrip("/")
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    finally:
        await conn.close()
