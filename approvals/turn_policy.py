"""shim: removed once imports move (to ``approvals.policy``, where the ``turns:`` section is)."""

from approvals.policy.turn_rules import *  # noqa: F403
