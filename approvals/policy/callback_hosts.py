"""Where an agent's callbacks may go: its ``callback_hosts`` allow-list (no SSRF)."""

from __future__ import annotations

from urllib.parse import urlsplit

__all__ = ["callback_allowed"]


def callback_allowed(url: str, hosts: tuple[str, ...]) -> bool:
    """Whether ``url`` is http(s) to an allowed host.

    An entry ``host:port`` allows exactly that port; a bare ``host`` allows that host on the
    scheme's default port only, so a listed name cannot be used to reach another service.
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username:
        return False
    host = parts.hostname.lower()
    default_port = 443 if parts.scheme == "https" else 80
    effective = port or default_port
    for entry in hosts:
        allowed_host, _, allowed_port = entry.lower().rpartition(":")
        if not allowed_host or not allowed_port.isdigit():
            allowed_host, allowed_port = entry.lower(), str(default_port)
        if allowed_host.strip("[]") == host and int(allowed_port) == effective:
            return True
    return False
