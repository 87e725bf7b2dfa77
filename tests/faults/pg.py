"""A PostgreSQL server the fault suite can stop and start: the binaries the ``pgserver`` package
ships, a data directory of its own, TCP on loopback only (no Unix socket), trust auth.

Not pgserver's own server object: that one listens on a Unix socket and stops when its last
user exits, while a scenario here must stop the server under traffic and start it again on the
same address. Never the system PostgreSQL.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support.ports import free_port

__all__ = ["StoppablePostgres", "stoppable_postgres"]

# pgserver runs its server as this system user when the tests run as root (initdb refuses root)
_SYSTEM_USER = "pgserver"


def _pgserver() -> Any:
    with warnings.catch_warnings():
        # pgserver's platformdirs warns about XDG_RUNTIME_DIR on servers; harmless here
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
        import pgserver
        import pgserver.utils

    return pgserver


def _bin_dir() -> Path:
    return Path(_pgserver().__file__).parent / "pginstall" / "bin"


class StoppablePostgres:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = root / "data"
        self.log = root / "server.log"
        self.port = free_port()
        self._user: str | None = None

    @property
    def dsn(self) -> str:
        """The admin DSN (database ``postgres``)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str, timeout: float = 60) -> None:
        result = subprocess.run(  # noqa: S603 (our own binaries, our own arguments)
            [str(_bin_dir() / tool), *args],
            user=self._user,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=self.root,
        )
        if result.returncode != 0:
            log = self.log.read_text("utf-8", "replace")[-4000:] if self.log.exists() else ""
            raise RuntimeError(
                f"{tool} {' '.join(args)} failed ({result.returncode}):\n"
                f"{result.stdout}\n{result.stderr}\nserver log:\n{log}"
            )

    def init(self) -> None:
        if os.geteuid() == 0:
            # as pgserver does it: a system user of its own, allowed through the path
            utils = _pgserver().utils
            utils.ensure_user_exists(_SYSTEM_USER)
            utils.ensure_prefix_permissions(self.root)
            self.root.chmod(0o755)
            self._user = _SYSTEM_USER
        self.data.mkdir(mode=0o700)
        self.log.touch()
        if self._user is not None:
            shutil.chown(self.data, self._user, self._user)
            shutil.chown(self.log, self._user, self._user)
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--no-sync",
        )
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": "''",
            # three replicas' pools and the test's own connections
            "max_connections": "300",
            # durability is not what these scenarios test; speed on a small machine is welcome
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
        }
        with (self.data / "postgresql.conf").open("a", encoding="utf-8") as conf:
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "30", "start")

    def stop(self) -> None:
        """``pg_ctl stop -m fast``: sessions are cut, the server is down when this returns."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "30", "stop")

    def running(self) -> bool:
        with socket.socket() as s:
            s.settimeout(0.5)
            return s.connect_ex(("127.0.0.1", self.port)) == 0


@contextlib.contextmanager
def stoppable_postgres() -> Iterator[StoppablePostgres]:
    # under /tmp with a short name: the server's user must be able to reach it
    root = Path(tempfile.mkdtemp(prefix="cs-faults-pg-"))
    server = StoppablePostgres(root)
    try:
        server.init()
        server.start()
        yield server
    finally:
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            if server.running():
                server.stop()
        shutil.rmtree(root, ignore_errors=True)
