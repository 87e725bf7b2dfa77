"""The store the core uses: :class:`approvals.repository.Repository`, under its old name."""

# shim: removed once imports move to approvals.repository
from approvals.repository import Repository as Store

__all__ = ["Store"]
