"""An embedded PostgreSQL (the ``pgserver`` package ships one) for running without
``DATABASE_URL``: started under a data directory, stopped when the last user exits."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["embedded_postgres"]

log = logging.getLogger(__name__)


@contextmanager
def embedded_postgres(data_dir: Path) -> Iterator[str]:
    """Yield the DSN of a PostgreSQL running on ``data_dir`` (created if new)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        # pgserver's platformdirs warns about XDG_RUNTIME_DIR on servers; it is harmless here
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
        import pgserver  # imported here: only this path needs the bundled server

        server: Any = pgserver.get_server(data_dir, cleanup_mode="stop")  # type: ignore[attr-defined]
    dsn: str = server.get_uri()
    log.info("embedded postgres started", extra={"action": "postgres", "data_dir": str(data_dir)})
    try:
        yield dsn
    finally:
        server.cleanup()
        log.info("embedded postgres stopped", extra={"action": "postgres"})
