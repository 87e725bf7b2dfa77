"""The core as tests build it: the one place a test constructs :class:`approvals.core.Core`."""

from __future__ import annotations

from approvals import clock as clocks
from approvals.core import Core, CurrentPolicy, Handlers, UsergroupMembers
from approvals.repository import Repository

__all__ = ["core"]


def core(
    store: Repository,
    policy: CurrentPolicy,
    handlers: Handlers,
    *,
    clock: clocks.Clock = clocks.utcnow,
    poll_interval: float = 1.0,
    members: UsergroupMembers | None = None,
) -> Core:
    """A core over ``store`` whose relay runs the edges' ``handlers`` (a kind without one is
    never run: a small world)."""
    return Core(
        store=store,
        policy=policy,
        handlers=handlers,
        members=members,
        clock=clock,
        poll_interval=poll_interval,
    )
