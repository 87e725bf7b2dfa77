"""The code samples of README.md and of every page of the documentation site (docs/**/*.md), as
the tests run them.

Markdown fences are simple enough to read here: a line opening with three or more backticks (or
tildes) starts a block, its info string names the language, and the same fence closes it. A
block that cannot run in CI carries ``<!-- not-run: reason -->`` on the line right before its
opening fence (blank lines between are allowed); every other block is run or checked by
``tests/integration/test_docs_samples.py`` (shell, JSON, YAML policies and gateway files, and
the Python of every page but
the framework guides) or ``tests/e2e/test_docs_samples.py`` (the Python of the framework guides,
:data:`FRAMEWORK_PAGES`, which needs the frameworks installed), and a block of a kind neither
knows fails the inventory test: a new sample cannot slip in untested.

The samples talk to ``http://localhost:3000`` with ``make run``'s development credentials, and
name ``127.0.0.1:8088`` as the agent's callback address. :class:`DocHarness` is the test bot
holding those very credentials; :func:`localise` only points the two addresses at the test's
loopback ports.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from bot.config import Config
from tests.support.harness import Harness

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = (
    "README.md",
    *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md")),
)
# YAML here is the MCP gateway's file (countersign_client.gateway.config), not a policy
GATEWAY_PAGES = frozenset({"docs/mcp-gateway.md"})
# the framework guides: their Python runs with the real frameworks, in the e2e suite
FRAMEWORK_PAGES = frozenset(
    f"docs/{name}.md"
    for name in ("maf", "ag-ui", "langgraph", "openai-agents", "claude-code", "typescript")
)

# make run's development credentials (Makefile), the ones the samples carry
DEV_TOKEN = "dev-sales-bot-token-change-me"
DEV_SIGNING = "dev-sales-bot-signing-change-me"
SAMPLE_BASE_URL = "http://localhost:3000"
SAMPLE_CALLBACK_HOST = "127.0.0.1:8088"
SAMPLE_APPROVAL_ID = "apr_4f1c…"

Kind = Literal["not-run", "shell", "json", "policy", "gateway", "python", "python-e2e", "unknown"]

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_NOT_RUN = re.compile(r"^\s*<!--\s*not-run:\s*(?P<reason>.+?)\s*-->\s*$")
SHELL = frozenset({"sh", "bash", "shell", "console"})


@dataclass(frozen=True)
class Block:
    path: str  # relative to the checkout, e.g. "docs/maf.md"
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    not_run: str | None  # the marker's reason

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}:{self.lang or 'plain'}"

    @property
    def kind(self) -> Kind:
        """How the tests take this block (see the module docstring)."""
        if self.not_run is not None:
            return "not-run"
        if self.lang in SHELL:
            return "shell"
        if self.lang == "json":
            return "json"
        if self.lang == "yaml":
            return "gateway" if self.path in GATEWAY_PAGES else "policy"
        if self.lang == "python":
            return "python-e2e" if self.path in FRAMEWORK_PAGES else "python"
        return "unknown"


def blocks_of(path: str, text: str) -> list[Block]:
    """Every fenced block of one Markdown text, in order."""
    lines = text.splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        fence = opening["fence"]
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not (
            lines[i].strip().startswith(fence[0] * len(fence))
            and lines[i].strip().strip(fence[0]) == ""
        ):
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise ValueError(f"{path}:{start + 1}: a fenced block is never closed")
        i += 1
        found.append(
            Block(
                path=path,
                line=start + 1,
                lang=opening["info"].strip().split(" ")[0].lower(),
                text="\n".join(body) + "\n",
                not_run=_marker_before(lines, start),
            )
        )
    return found


def _marker_before(lines: list[str], start: int) -> str | None:
    j = start - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    marker = _NOT_RUN.match(lines[j]) if j >= 0 else None
    return marker["reason"] if marker else None


def all_blocks() -> list[Block]:
    return [b for doc in DOCUMENTS for b in blocks_of(doc, (ROOT / doc).read_text("utf-8"))]


def of_kind(*kinds: Kind) -> list[Block]:
    return [b for b in all_blocks() if b.kind in kinds]


def block_with(needle: str, kind: Kind = "shell") -> Block:
    """The first sample of ``kind`` whose text holds ``needle`` (README first, then the pages in
    order): a sample another test builds on, wherever the documentation keeps it."""
    found = [b for b in of_kind(kind) if needle in b.text]
    if not found:
        raise AssertionError(f"no {kind} sample holds {needle!r}")
    return found[0]


def localise(text: str, base_url: str, callback_port: int, approval_id: str = "") -> str:
    """A sample's text aimed at the test's loopback bot and agent receiver (and, for the README's
    ``apr_4f1c…`` placeholder, at a real approval)."""
    text = text.replace(SAMPLE_BASE_URL, base_url)
    text = text.replace(SAMPLE_CALLBACK_HOST, f"127.0.0.1:{callback_port}")
    text = text.replace('"127.0.0.1", 8088', f'"127.0.0.1", {callback_port}')  # where it listens
    return text.replace(SAMPLE_APPROVAL_ID, approval_id) if approval_id else text


def script_of(block: Block) -> str:
    """A whole sample program without its last line, ``asyncio.run(main())``: the test awaits
    ``main()`` on its own event loop, beside the bot."""
    body = block.text.rstrip("\n")
    head, _, last = body.rpartition("\n")
    if last != "asyncio.run(main())":
        raise AssertionError(f"{block.id}: a sample program ends with asyncio.run(main())")
    return head + "\n"


@dataclass
class DocHarness(Harness):
    """The test bot with make run's development credentials for ``sales-bot``: the token and
    signing key the samples carry work as written."""

    def config(self) -> Config:
        config = super().config()
        agents = tuple(
            dataclasses.replace(a, token=DEV_TOKEN, callback_secret=DEV_SIGNING)
            if a.name == "sales-bot"
            else a
            for a in config.agents
        )
        return dataclasses.replace(config, agents=agents)


def run_sample(block: Block, namespace: dict[str, Any], text: str | None = None) -> None:
    """Execute a Python sample (this checkout's own documentation) in ``namespace``."""
    code = compile(text if text is not None else block.text, block.id, "exec")
    exec(code, namespace)  # noqa: S102 - the point of the test: the sample runs as written
