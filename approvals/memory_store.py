"""The in-memory store: a :class:`~approvals.repository.Repository` over
:mod:`approvals.memory_db`, under its old name (``MemoryStore()``)."""

from approvals import memory_db
from approvals.repository import Repository

__all__ = ["MemoryStore"]


# shim: removed once imports move to approvals.repository
class MemoryStore(Repository):
    def __init__(self) -> None:
        super().__init__(memory_db.MemoryDatabase())
