"""Deterministic, pure rules; nothing else of Countersign's: plain facts in, verdicts out.

- :mod:`guards.authority` — who may decide an approval.
"""

__all__ = ["authority"]
