"""Where the policy comes from: its YAML file, read with every problem named by file, line and
key, and kept in force by a :class:`PolicySource` that reloads it on demand (SIGHUP) or when the
file changes.

An invalid new file is refused with a logged error and the old policy stays in force. Pending
approvals keep the rule, role and quorum they were created under (stored on the approval); who
holds a role is read from the current policy at click time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Protocol, TypeVar

import yaml
from pydantic import ValidationError

from approvals import errors
from approvals.policy.schema import Policy

__all__ = ["Loaded", "PolicyFile", "PolicySource", "load_file"]

log = logging.getLogger(__name__)

Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class PolicyFile:
    """A valid policy and the YAML it was read from (to name a key's line in later problems)."""

    path: Path
    policy: Policy
    root: yaml.Node | None

    def where(self, loc: Loc) -> str:
        """``file:line: key`` of the key at ``loc``."""
        return _where(self.path, self.root, loc)


def load_file(path: Path) -> PolicyFile:
    """Read and validate the policy file; raises PolicyError listing every problem."""
    try:
        text = path.read_text("utf-8")
    except OSError as exc:
        raise errors.PolicyError(
            [f"{path}: cannot read the policy file ({exc.strerror})"]
        ) from None
    except UnicodeDecodeError as exc:
        raise errors.PolicyError([f"{path}: not UTF-8 text (byte {exc.start})"]) from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = f":{mark.line + 1}" if mark else ""
        raise errors.PolicyError([f"{path}{line}: invalid YAML: {exc.problem}"]) from None
    duplicates = list(_duplicate_keys(path, root))
    if duplicates:
        # YAML keeps the last of two equal keys: a second `finance:` would silently replace
        # who holds authority.
        raise errors.PolicyError(duplicates)
    if not isinstance(data, dict):
        raise errors.PolicyError([f"{path}: the policy file must be a mapping of keys"])
    try:
        parsed = Policy.model_validate(data)
    except ValidationError as exc:
        raise errors.PolicyError(
            [f"{_where(path, root, tuple(e['loc']))}: {e['msg']}" for e in exc.errors()]
        ) from None
    problems = [f"{_where(path, root, loc)}: {msg}" for loc, msg in parsed.problems()]
    if problems:
        raise errors.PolicyError(problems)
    return PolicyFile(path=path, policy=parsed, root=root)


def _node_at(root: yaml.Node | None, loc: Loc) -> yaml.Node | None:
    """The deepest YAML node along ``loc`` (for its line number)."""
    node = root
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            found = next((v for k, v in node.value if k.value == str(part)), None)
            if found is None:
                # an extra key: point at the key itself
                key = next((k for k, _ in node.value if k.value == str(part)), None)
                return key or node
            node = found
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return node
            node = node.value[part]
        else:
            return node
    return node


def _where(path: Path, root: yaml.Node | None, loc: Loc) -> str:
    node = _node_at(root, loc)
    line = f":{node.start_mark.line + 1}" if node is not None else ""
    key = ".".join(str(p) for p in loc) or "(top level)"
    return f"{path}{line}: {key}"


def _duplicate_keys(path: Path, node: yaml.Node | None, where: str = "") -> Iterator[str]:
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            name = f"{where}.{key.value}" if where else str(key.value)
            if key.value in seen:
                yield f"{path}:{key.start_mark.line + 1}: {name}: duplicate key"
            seen.add(key.value)
            yield from _duplicate_keys(path, value, name)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            yield from _duplicate_keys(path, item, f"{where}.{index}")


class Loaded(Protocol):
    """What a file becomes: at least a policy (the bot adds its agents' credentials)."""

    @property
    def policy(self) -> Policy: ...


L = TypeVar("L", bound=Loaded)


class PolicySource(Generic[L]):
    """The policy in force, read from ``path`` by ``read`` (e.g. :func:`load_file`).

    ``reload`` reads the file again; ``watch`` does whenever its modification time changes.
    Whatever ``read`` refuses (a ConfigError) is logged and the old one stays in force. Without
    ``read`` the policy is fixed (built in code): nothing reloads.
    """

    def __init__(self, current: L, path: Path, read: Callable[[Path], L] | None = None) -> None:
        self._current = current
        self._path = path
        self._read = read
        self._mtime = self._stat()

    def __call__(self) -> Policy:
        """The policy in force now (the services call it on every use: a reload shows at once)."""
        return self._current.policy

    @property
    def current(self) -> L:
        """Everything read from the file in force (for the bot: the agents' credentials too)."""
        return self._current

    def _stat(self) -> float | None:
        try:
            return self._path.stat().st_mtime
        except OSError:
            return None

    def reload(self) -> bool:
        """Read the file again; keep the old policy (and say why) if the new one is refused."""
        if self._read is None:
            return False
        self._mtime = self._stat()
        try:
            new = self._read(self._path)
        except errors.ConfigError as exc:
            log.error(
                "policy reload refused; the previous policy stays in force",
                extra={"action": "reload", "problems": exc.problems},
            )
            return False
        old = self._current.policy.version
        self._current = new
        log.info(
            "policy reloaded",
            extra={"action": "reload", "from": old, "to": new.policy.version},
        )
        return True

    async def watch(self, interval: float = 2.0) -> None:
        """Reload whenever the file's modification time changes (until cancelled)."""
        while True:
            await asyncio.sleep(interval)
            if self._read is not None and self._stat() != self._mtime:
                self.reload()
