"""The test suite's port chooser stays out of the kernel's ephemeral range, where another
test's port-0 bind or an outgoing connection could take its port before the server listens."""

from __future__ import annotations

import random
import socket

import pytest

from tests.support import ports


def test_a_chosen_port_is_below_the_ephemeral_range_and_binds() -> None:
    start = ports._ephemeral_start()
    for _ in range(20):
        port = ports.free_port()
        assert 20000 <= port < start
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_port_someone_listens_on_is_never_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", ports.free_port()))
        taken.listen()
        used = int(taken.getsockname()[1])
        other = used - 1
        draws = iter([used, used, other])
        monkeypatch.setattr(random, "randint", lambda low, high: next(draws))
        assert ports.free_port() == other
