"""Loopback ports for servers that must know their port before they listen (a public URL in
their environment, a subprocess told ``PORT=``).

Choosing a port by binding to port 0 and closing the socket leaves a window before the server
binds it; in that window the kernel may hand the same port to another test's port-0 bind or to
an outgoing connection's local end, since both draw from the ephemeral range. CI once failed on
exactly that ("address already in use"). Ports here are drawn at random from below the
ephemeral range, where neither draws, and only ones that bind right now are returned.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["free_port"]

_LOWEST = 20000  # above the well-known and most registered services' ports
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _ephemeral_start() -> int:
    try:
        return int(_RANGE_FILE.read_text("ascii").split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default when the setting cannot be read


def free_port() -> int:
    """A loopback TCP port nobody listens on right now, outside the ephemeral range."""
    highest = _ephemeral_start() - 1
    if highest <= _LOWEST:
        # an unusual range configuration: the kernel's choice is the only one left
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])
    for _ in range(100):
        port = random.randint(_LOWEST, highest)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port between {_LOWEST} and {highest}")
