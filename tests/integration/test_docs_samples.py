"""Every fenced block of README.md and of the documentation site's pages (docs/**/*.md) is run,
checked or marked ``not-run`` with a reason: the shell samples run as written (their ``export``
lines, curl, the ``countersign`` CLI) against the real bot on loopback, the JSON samples are
compared with what that bot answers, the YAML policy snippets go through the real policy loader,
and the Python of every page but the framework guides runs. The framework guides' Python runs in
tests/e2e/test_docs_samples.py. The README stays a front door, its links resolve, and the HTTP
API page's endpoint table is the OpenAPI document's."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import yaml

from approvals import hashing, models, policy, service
from approvals.policy import load_file
from bot import openapi
from countersign_client.gateway.config import load as load_gateway_file
from guards import authority
from tests.support import harness as support
from tests.support import waiting
from tests.support.doc_samples import (
    DEV_SIGNING,
    DEV_TOKEN,
    DOCUMENTS,
    ROOT,
    Block,
    DocHarness,
    all_blocks,
    block_with,
    localise,
    of_kind,
    run_sample,
)
from tests.support.harness import CHANNEL, FINANCE, OUTSIDER

NOT_EXECUTED = "The tool call was not executed; do not retry it unchanged."


def _ids(blocks: list[Block]) -> list[str]:
    return [b.id for b in blocks]


# -- the inventory -----------------------------------------------------------------------------


def test_every_block_is_run_checked_or_marked_not_run() -> None:
    blocks = all_blocks()
    unknown = [b.id for b in blocks if b.kind == "unknown"]
    assert not unknown, (
        f"blocks no test runs: mark them <!-- not-run: reason --> or run them: {unknown}"
    )
    # the extractor sees what a Markdown reader sees: as many fences as the files hold
    for doc in DOCUMENTS:
        text = (ROOT / doc).read_text("utf-8")
        fences = [line for line in text.splitlines() if re.match(r"^ {0,3}```", line)]
        assert len(fences) == 2 * sum(b.path == doc for b in blocks), doc
    for b in blocks:
        assert b.kind != "not-run" or b.not_run, f"{b.id}: a not-run marker gives its reason"


class _MkDocsLoader(yaml.SafeLoader):
    """mkdocs.yml as data: its ``!!python/name:`` tags (the mermaid fence) read as strings."""


_MkDocsLoader.add_multi_constructor(
    "tag:yaml.org,2002:python/", lambda loader, suffix, node: f"{suffix}"
)


def _nav_pages(entries: Any) -> list[str]:
    pages: list[str] = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_the_extractor_reads_every_page_of_the_site() -> None:
    site = yaml.load((ROOT / "mkdocs.yml").read_text("utf-8"), _MkDocsLoader)  # noqa: S506 - safe
    pages = {f"docs/{page}" for page in _nav_pages(site["nav"])}
    assert pages <= set(DOCUMENTS), pages - set(DOCUMENTS)
    # every page is in the nav (mkdocs build --strict says so too, but only in make docs)
    assert set(DOCUMENTS) - {"README.md"} == pages, set(DOCUMENTS) - {"README.md"} - pages


LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def test_the_readme_is_a_front_door() -> None:
    """At most 200 lines; the two commands; every link of its own resolves (the site's links are
    checked by mkdocs build --strict, the README's are not: it is not a page of the site)."""
    text = (ROOT / "README.md").read_text("utf-8")
    assert len(text.splitlines()) <= 200
    readme = [b for b in all_blocks() if b.path == "README.md"]
    [commands] = [b for b in readme if b.text.startswith("make run")]
    assert [line.split()[:2] for line in commands.text.splitlines()] == [
        ["make", "run"],
        ["make", "test"],
    ]
    for link in LINK.finditer(text):
        target = link["target"].split("#", 1)[0]
        if target.startswith(("http://", "https://")) or not target:
            continue
        assert (ROOT / target).exists(), f"README.md links to {target}, which is missing"


ENDPOINT_ROW = re.compile(r"^\| `(?P<method>GET|POST|PUT|PATCH|DELETE) (?P<path>/[^`]*)` \|", re.M)


def test_the_http_api_pages_endpoint_table_is_the_openapi_documents() -> None:
    listed = {
        (row["method"].lower(), row["path"])
        for row in ENDPOINT_ROW.finditer((ROOT / "docs/http-api.md").read_text("utf-8"))
    }
    document = json.loads((ROOT / "docs/openapi.json").read_text("utf-8"))
    published = {(method, path) for path, item in document["paths"].items() for method in item}
    assert listed == published, (sorted(listed - published), sorted(published - listed))


def test_the_extractor_reads_markers_languages_and_bodies() -> None:
    from tests.support.doc_samples import blocks_of

    text = (
        "intro\n<!-- not-run: a diagram -->\n\n```\na -> b\n```\n"
        "```python\nprint(1)\n```\n````sh\n```\nnested\n````\n"
    )
    first, second, third = blocks_of("x.md", text)
    assert (first.lang, first.not_run, first.text, first.kind) == (
        "",
        "a diagram",
        "a -> b\n",
        "not-run",
    )
    assert (second.lang, second.not_run, second.text, second.kind) == (
        "python",
        None,
        "print(1)\n",
        "python",
    )
    assert (third.lang, third.text, third.line) == ("sh", "```\nnested\n", 10)
    with pytest.raises(ValueError, match="never closed"):
        blocks_of("y.md", "```sh\necho\n")


# -- the bot the samples talk to --------------------------------------------------------------


@pytest.fixture
async def bot(database_url: str) -> AsyncIterator[DocHarness]:
    h = DocHarness(database_url=database_url)
    await h.start()
    yield h
    await h.stop()


COUNTERSIGN = str(Path(sys.executable).parent / "countersign")


async def run_shell(
    bot: DocHarness, block: Block, cwd: Path, approval_id: str = ""
) -> subprocess.CompletedProcess[str]:
    """The block as a bash script, aimed at the test bot (its own exports, nothing else of ours
    but PATH and where the database is). In a thread: the bot keeps serving meanwhile."""
    script = localise(block.text, bot.base_url, bot.receiver.port, approval_id)
    script = script.replace(".venv/bin/countersign", shlex.quote(COUNTERSIGN))
    env = {"PATH": os.environ["PATH"], "HOME": str(cwd), "DATABASE_URL": bot.database_url}
    result = await asyncio.to_thread(
        subprocess.run,
        ["bash", "-e", "-o", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, (block.id, result.stdout, result.stderr)
    return result


def printed_json(result: subprocess.CompletedProcess[str]) -> Any:
    body = json.loads(result.stdout)
    assert not (isinstance(body, dict) and "error" in body), body
    return body


SUBMIT = "-X POST http://localhost:3000/v1/approvals \\"


async def submit_as_readme(bot: DocHarness, cwd: Path) -> dict[str, Any]:
    """The submit sample (the README's round trip), run as written."""
    resource = printed_json(await run_shell(bot, block_with(SUBMIT), cwd))
    assert isinstance(resource, dict)
    return resource


async def approve(bot: DocHarness, approval_id: str) -> None:
    await bot.card_ts(approval_id)
    assert await bot.click(FINANCE[0], approval_id) == 200


async def resource_of(bot: DocHarness, approval_id: str) -> dict[str, Any]:
    status, body = await bot.call("GET", f"/v1/approvals/{approval_id}", token=DEV_TOKEN)
    assert status == 200, body
    assert isinstance(body, dict)
    return body


# -- shell samples: one scenario each, chosen by what the sample does ----------------------------


async def _submit(bot: DocHarness, block: Block, cwd: Path) -> None:
    resource = printed_json(await run_shell(bot, block, cwd))
    assert resource["status"] == "pending"
    assert resource["request_id"] == "af-call-7"
    again = printed_json(await run_shell(bot, block, cwd))  # idempotent: the same approval
    assert again["approval_id"] == resource["approval_id"]


async def _long_poll(bot: DocHarness, block: Block, cwd: Path) -> None:
    resource = await submit_as_readme(bot, cwd)
    polled = asyncio.create_task(run_shell(bot, block, cwd, resource["approval_id"]))
    await approve(bot, resource["approval_id"])
    settled = printed_json(await polled)
    assert settled["status"] == "approved"


async def _cancel(bot: DocHarness, block: Block, cwd: Path) -> None:
    resource = await submit_as_readme(bot, cwd)
    cancelled = printed_json(await run_shell(bot, block, cwd, resource["approval_id"]))
    assert cancelled["status"] == "cancelled"
    assert (
        cancelled["reason"]
        == f"Cancelled by the agent: the user changed their mind. {NOT_EXECUTED}"
    )


async def _claim_and_report(bot: DocHarness, block: Block, cwd: Path) -> None:
    resource = await submit_as_readme(bot, cwd)
    approval_id = resource["approval_id"]
    await approve(bot, approval_id)
    await waiting.until(lambda: bot.receiver.delivered != [], what="the callback")
    result = await run_shell(bot, block, cwd, approval_id)
    # curl prints each answer with no newline after it: two JSON values back to back
    decoder = json.JSONDecoder()
    claimed, end = decoder.raw_decode(result.stdout)
    reported, _ = decoder.raw_decode(result.stdout[end:].lstrip())
    assert claimed["execution"]["outcome"] is None, claimed
    assert claimed["arguments_sha256"] == resource["arguments_sha256"]
    outcome = reported["execution"]["outcome"]
    assert (outcome["status"], outcome["detail"]) == ("ok", "paid, ref 8812"), reported
    # as the HTTP API page says: anyone else's claim is refused, naming the one that holds it
    status, refused = await bot.call(
        "POST",
        f"/v1/approvals/{approval_id}/execution",
        json_body={"idempotency_key": "worker-2/run-1"},
        token=DEV_TOKEN,
    )
    assert (status, refused["error"]["code"]) == (409, "already_claimed")
    assert refused["error"]["claim"]["claim_id"] == claimed["execution"]["claim_id"]
    ts = await bot.card_ts(approval_id)
    await bot.standin.wait_for(
        lambda: "by sales-bot: ok" in json.dumps(bot.standin.card(CHANNEL, ts)["blocks"])
    )


async def _events_and_audit(bot: DocHarness, block: Block, cwd: Path) -> None:
    resource = await submit_as_readme(bot, cwd)
    approval_id = resource["approval_id"]
    await bot.card_ts(approval_id)
    assert await bot.click(OUTSIDER, approval_id) == 200  # refused: an attempt
    await bot.wait_ephemeral(OUTSIDER)
    await approve(bot, approval_id)
    await waiting.until(lambda: bot.receiver.delivered != [], what="the callback")
    turn = block_with("-X POST http://localhost:3000/v1/turns")
    verdict = printed_json(await run_shell(bot, turn, cwd))  # escalates: an approval too
    result = await run_shell(bot, block, cwd, approval_id)
    events = printed_json(result)
    kinds = [e["kind"] for e in events["events"]]
    assert kinds == ["created", "attempt", "attempt", "settlement"], events
    lines = [json.loads(line) for line in (cwd / "audit.jsonl").read_text().splitlines()]
    # what the audit page says the export holds: creations, attempts, settlements, turn verdicts,
    # deliveries (the card posted may be recorded after a click: apart) and seals (whenever
    # the sealer runs)
    mine = [
        (line["kind"], line["data"].get("outcome"))
        for line in lines
        if line["approval_id"] == approval_id and line["kind"] != "delivery"
    ]
    delivered = [
        line["data"]["delivered"]
        for line in lines
        if line["approval_id"] == approval_id and line["kind"] == "delivery"
    ]
    assert sorted(delivered) == ["callback", "post_card"], lines
    assert mine == [
        ("created", None),
        ("attempt", "no_authority"),
        ("attempt", "accepted"),
        ("settlement", None),
    ], lines
    turns = [line for line in lines if line["kind"] == "turn"]
    assert [t["approval_id"] for t in turns] == [verdict["approval_id"]], lines
    assert turns[0]["data"]["verdict"] == "escalate", turns
    escalation = [
        line["kind"]
        for line in lines
        if line["approval_id"] == verdict["approval_id"] and line["kind"] != "delivery"
    ]
    assert sorted(escalation) == ["created", "turn"], lines


async def _redrive(bot: DocHarness, block: Block, cwd: Path) -> None:
    bot.receiver.answers = [500] * 10_000  # the agent is down past the delivery budget
    resource = await submit_as_readme(bot, cwd)
    approval_id = resource["approval_id"]
    await approve(bot, approval_id)

    async def dead() -> bool:
        return bool((await resource_of(bot, approval_id))["delivery"]["status"] == "dead_letter")

    await waiting.until(dead, timeout=20, what="the callback dead-lettered")
    bot.receiver.answers = []
    result = await run_shell(bot, block, cwd, approval_id)
    assert result.stdout == f"1 dead-lettered deliveries of {approval_id} are due again\n"
    await bot.receiver.wait_delivered()


async def _turn(bot: DocHarness, block: Block, cwd: Path) -> None:
    verdict = printed_json(await run_shell(bot, block, cwd))
    assert verdict["verdict"] == "escalate"


async def _turn_list(bot: DocHarness, block: Block, cwd: Path) -> None:
    await run_shell(bot, block_with("-X POST http://localhost:3000/v1/turns"), cwd)
    listed = printed_json(await run_shell(bot, block, cwd))
    assert [t["request_id"] for t in listed["turns"]] == ["turn-7"], listed


class _Finance:
    """Slack's answer for FINANCE[0] as the directory gives it: a member of S0FINANCE."""

    async def approver(self, slack_user_id: str, usergroups: frozenset[str]) -> authority.Approver:
        return authority.Approver(
            slack_user_id=slack_user_id,
            email=f"{slack_user_id.lower()}@example.com",
            usergroups=frozenset({"S0FINANCE"}) & usergroups,
        )


async def _grants(bot: DocHarness, block: Block, cwd: Path) -> None:
    """docs/grants.md's operator commands, on a grant made as Approve & allow more makes one
    (the service's own path, on the bot's database)."""
    data = support.test_policy(bot.receiver.port).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )
    limits = {"max_seconds": 3600, "max_uses": 20}
    data["rules"].insert(0, {"tool": "send_quote", "require": "finance", "grants": limits})
    current = policy.Policy.model_validate(data)
    assert bot.store is not None
    approvals = service.ApprovalService(store=bot.store, policy=lambda: current)
    tool = {"name": "send_quote", "call_id": "q1", "arguments": {"account": "ACME", "amount": 900}}
    request = models.ApprovalRequest.model_validate(bot.request_body(request_id="q1", tool=tool))
    first, _ = await approvals.submit("sales-bot", request)
    terms = {"scope": "session", "seconds": 600, "uses": 3}
    granted = await approvals.grant(
        first.approval_id, slack_user_id=FINANCE[0].id, terms=terms, directory=_Finance()
    )
    assert isinstance(granted, service.Settled), granted
    [made] = await approvals.grants_of(first.approval_id)
    script = Block(
        path=block.path,
        line=block.line,
        lang=block.lang,
        text=block.text.replace("grt_…", made.grant_id),
        not_run=None,
    )
    result = await run_shell(bot, script, cwd)
    out = result.stdout.splitlines()
    assert out[0].startswith(f"{made.grant_id}  live"), out
    [line] = [json.loads(x) for x in out if x.startswith("{")]
    assert (line["grant_id"], line["max_uses"], line["state"]) == (made.grant_id, 3, "live")
    assert out[-1] == f"{made.grant_id} revoked: later calls need a decision again", out
    stored = await bot.store.get_grant(made.grant_id)
    assert stored is not None
    assert stored.revoked_by == "cli"


Scenario = Callable[[DocHarness, Block, Path], Coroutine[Any, Any, None]]
SCENARIOS: list[tuple[str, Scenario]] = [
    (SUBMIT, _submit),
    ("?wait=30", _long_poll),
    ("/cancel", _cancel),
    ("/execution", _claim_and_report),
    ("/events", _events_and_audit),
    ("countersign redrive", _redrive),
    ("-X POST http://localhost:3000/v1/turns", _turn),
    ("/v1/turns?session_id=", _turn_list),
    ("countersign grants", _grants),
]
EXTRA = re.compile(r"^pip install 'countersign-client\[(?P<extra>[a-z-]+)\]'\s+#")


def _client_extras() -> dict[str, list[str]]:
    data = tomllib.loads((ROOT / "clients/python/pyproject.toml").read_text("utf-8"))
    extras: dict[str, list[str]] = data["project"]["optional-dependencies"]
    return extras


@pytest.mark.parametrize("block", of_kind("shell"), ids=_ids(of_kind("shell")))
async def test_shell_sample(block: Block, database_url: str, tmp_path: Path) -> None:
    lines = [line for line in block.text.splitlines() if line.strip()]
    if len(lines) == 1 and (extra := EXTRA.match(lines[0])):
        # an install line: the extra exists and the comment names what it installs
        packages = _client_extras()[extra["extra"]]
        comment = lines[0].split("#", 1)[1]
        for requirement in packages:
            name = re.split(r"[<>=!~ ]", requirement)[0]
            assert name in comment or (name == "mcp" and "mcp package" in comment), (
                block.id,
                name,
            )
        return
    matching = [run for needle, run in SCENARIOS if needle in block.text]
    assert len(matching) == 1, f"{block.id}: no scenario runs this sample (or several do)"
    bot = DocHarness(
        database_url=database_url, delivery_budget=1 if "redrive" in block.text else 86400
    )
    await bot.start()
    try:
        await matching[0](bot, block, tmp_path)
    finally:
        await bot.stop()


# -- JSON samples: the shape the bot really answers ------------------------------------------


def same_keys(sample: Any, real: Any, where: str = "") -> None:
    """Every object in the sample has the keys of the real answer's object at that place."""
    if isinstance(sample, dict) and isinstance(real, dict):
        assert set(sample) == set(real), (where, sorted(set(sample) ^ set(real)))
        for key in sample:
            same_keys(sample[key], real[key], f"{where}.{key}")
    elif isinstance(sample, list) and isinstance(real, list) and sample and real:
        same_keys(sample[0], real[0], f"{where}[0]")


def deterministic(sample: Any, real: Any, where: str = "") -> None:
    """Values that are not placeholders (``…``) or times are the real ones."""
    if isinstance(sample, dict):
        for key, value in sample.items():
            if key.endswith("_at") or key in {"at", "ts"}:
                continue
            deterministic(value, real[key], f"{where}.{key}")
    elif isinstance(sample, str) and "…" in sample:
        prefix = sample.split("…", 1)[0]  # "apr_4f1c…": an id of that kind
        prefix = prefix[: prefix.index("_") + 1] if "_" in prefix else ""
        assert isinstance(real, str), (where, real)
        assert real.startswith(prefix), (where, sample, real)
    else:
        assert sample == real, (where, sample, real)


async def _resource_sample(sample: Any, database_url: str, tmp_path: Path) -> None:
    bot = DocHarness(database_url=database_url)
    await bot.start()
    try:
        resource = await submit_as_readme(bot, tmp_path)
        approval_id = resource["approval_id"]

        async def posted() -> bool:
            return bool((await resource_of(bot, approval_id))["card"]["status"] == "posted")

        await waiting.until(posted, what="the card recorded as posted")
        real = await resource_of(bot, approval_id)
        # what the API page says `why` holds, on a rule with a condition (refund: amount > 10000)
        status, conditioned = await bot.call(
            "POST",
            "/v1/approvals",
            json_body=bot.request_body(
                request_id="af-call-8",
                tool={"name": "refund", "call_id": "call_2", "arguments": {"amount": 12000}},
            ),
            token=DEV_TOKEN,
        )
    finally:
        await bot.stop()
    same_keys(sample, real)
    assert status == 201, conditioned
    assert conditioned["why"] == "arguments.amount 12000 > 10000"
    # the stand-in's channel; the ts is Slack's
    deterministic({**sample, "card": {**sample["card"], "channel": CHANNEL}}, real)


async def _card_sample(sample: Any, database_url: str, tmp_path: Path) -> None:
    bot = DocHarness(database_url=database_url)
    await bot.start()
    try:
        resource = await submit_as_readme(bot, tmp_path)
    finally:
        await bot.stop()
    same_keys(sample["card"], resource["card"])
    assert sample["card"]["status"] == "pending"
    assert sample["card"]["error"].startswith("slack: not_in_channel (HTTP 200): ")


async def _edit_sample(sample: Any, database_url: str, tmp_path: Path) -> None:
    """The resource's edit, as the OpenAPI document's model reads it (extra keys refused), its
    patch taking the amount where the arguments say."""
    edit = openapi.ResourceEdit.model_validate(sample["edit"])
    assert edit.arguments_sha256 == hashing.arguments_sha256(edit.arguments)
    [op] = edit.patch
    assert op["path"] == "/amount"
    assert op["value"] == edit.arguments["amount"]


async def _turn_sample(sample: Any, database_url: str, tmp_path: Path) -> None:
    bot = DocHarness(database_url=database_url)
    await bot.start()
    try:
        block = block_with("-X POST http://localhost:3000/v1/turns")
        real = printed_json(await run_shell(bot, block, tmp_path))
    finally:
        await bot.stop()
    same_keys(sample, real)
    deterministic(sample, real)


ENV_TABLE = re.compile(r"^\| `(?P<name>[A-Z_]+)` \|", re.MULTILINE)


async def _mcp_json_sample(sample: Any, database_url: str, tmp_path: Path) -> None:
    [server] = sample["mcpServers"].values()
    assert (server["command"], server["args"]) == ("countersign", ["mcp-permission"])
    documented = set(ENV_TABLE.findall((ROOT / "docs/claude-code.md").read_text("utf-8")))
    assert set(server["env"]) <= documented, set(server["env"]) - documented


GATEWAY_PAGE = "docs/mcp-gateway.md"


def _gateway_file() -> Any:
    [block] = of_kind("gateway")
    return yaml.safe_load(block.text)


async def _gateway_stdio_sample(sample: Any, database_url: str, tmp_path: Path) -> None:
    """A client's entry for the gateway on stdio: the command with ``--config`` and a file, the
    agent token under the variable the page's file names (tests/e2e/test_mcp_gateway.py starts
    the gateway as each entry says)."""
    [server] = (sample.get("mcpServers") or sample["servers"]).values()
    assert server.get("type", "stdio") == "stdio"
    assert Path(server["command"]).name == "countersign-mcp-gateway"
    assert server["args"][0] == "--config"
    assert server["args"][1].endswith("gateway.yml")
    assert len(server["args"]) == 2
    assert set(server["env"]) == {_gateway_file()["countersign"]["token_env"]}
    for reference in re.findall(r"\$\{input:([^}]+)\}", json.dumps(sample)):
        assert reference in {entry["id"] for entry in sample["inputs"]}


async def _gateway_http_sample(sample: Any, database_url: str, tmp_path: Path) -> None:
    """A client's entry for ``--http 127.0.0.1:8765`` as the page runs it: the URL is /mcp on
    that address, and the bearer token goes in Authorization."""
    [server] = sample["servers"].values()
    text = (ROOT / GATEWAY_PAGE).read_text("utf-8")
    assert "--http 127.0.0.1:8765" in text
    assert server["url"] == "http://127.0.0.1:8765/mcp"
    assert server["headers"]["Authorization"].startswith("Bearer ${input:")


async def _permission_sample(sample: Any, database_url: str, tmp_path: Path) -> None:
    if sample["behavior"] == "allow":
        assert set(sample) == {"behavior", "updatedInput"}
        assert isinstance(sample["updatedInput"], dict)
    else:
        assert set(sample) == {"behavior", "message"}
        assert sample["behavior"] == "deny"
        assert sample["message"].endswith(NOT_EXECUTED)


JsonCheck = Callable[[Any, str, Path], Coroutine[Any, Any, None]]
JSON_CHECKS: list[tuple[str, JsonCheck]] = [
    ('"approval_id": "apr_4f1c…", "status": "pending"', _resource_sample),
    ('"card": {"status": "pending"', _card_sample),
    ('"verdict": "escalate"', _turn_sample),
    ('"mcp-permission"', _mcp_json_sample),
    ('countersign-mcp-gateway"', _gateway_stdio_sample),
    ('"type": "http"', _gateway_http_sample),
    ('"behavior"', _permission_sample),
    ('{ "edit": {', _edit_sample),
]


@pytest.mark.parametrize("block", of_kind("json"), ids=_ids(of_kind("json")))
async def test_json_sample(block: Block, database_url: str, tmp_path: Path) -> None:
    text = block.text.strip()
    # a member shown on its own ("card": {...}) is read as the object holding it
    sample = json.loads(text if text.startswith(("{", "[")) else "{" + text + "}")
    matching = [check for needle, check in JSON_CHECKS if needle in block.text]
    assert len(matching) == 1, f"{block.id}: no check compares this sample (or several do)"
    await matching[0](sample, database_url, tmp_path)


# -- YAML policy snippets: the real loader ------------------------------------------------------


def merged(base: Any, snippet: Any) -> Any:
    """The snippet laid over the example policy: mappings merge, anything else replaces."""
    if isinstance(base, dict) and isinstance(snippet, dict):
        return {**base, **{k: merged(base.get(k), v) for k, v in snippet.items()}}
    return snippet


def _roles_named(data: dict[str, Any]) -> set[str]:
    names: set[str] = set()
    for rule in data.get("rules", []):
        required = rule.get("require", [])
        names.update([required] if isinstance(required, str) else required)
    return names


@pytest.mark.parametrize("block", of_kind("policy"), ids=_ids(of_kind("policy")))
def test_policy_sample(block: Block, tmp_path: Path) -> None:
    snippet = yaml.safe_load(block.text)
    assert isinstance(snippet, dict)
    if {"slack", "agents", "rules"} <= set(snippet):
        data = snippet  # a whole policy file: loaded as it is
    else:
        example = yaml.safe_load((ROOT / "countersign.example.yml").read_text("utf-8"))
        data = merged(example, snippet)
        # a role a snippet's rule requires without showing it is declared (held by nobody)
        for name in _roles_named(data) - set(data["roles"]):
            data["roles"][name] = {}
    path = tmp_path / "countersign.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), "utf-8")
    loaded = load_file(path)
    for key in snippet:  # what the snippet shows is what the policy holds
        field = "turn_rules" if key == "turns" and not hasattr(loaded.policy, "turns") else key
        assert getattr(loaded.policy, field, None) is not None, (block.id, key)


# -- the MCP gateway's file: the gateway's own loader ----------------------------------------


def _shown_in(snippet: Any, loaded: Any, where: str = "") -> None:
    """Every value the snippet sets is the loaded file's value at that place."""
    if isinstance(snippet, dict):
        assert isinstance(loaded, dict), where
        for key, value in snippet.items():
            assert key in loaded, f"{where}.{key}"
            _shown_in(value, loaded[key], f"{where}.{key}")
    else:
        assert snippet == loaded, (where, snippet, loaded)


@pytest.mark.parametrize("block", of_kind("gateway"), ids=_ids(of_kind("gateway")))
def test_gateway_file_sample(block: Block, tmp_path: Path) -> None:
    snippet = yaml.safe_load(block.text)
    path = tmp_path / "gateway.yml"
    path.write_text(block.text, "utf-8")
    config = load_gateway_file(path, {snippet["countersign"]["token_env"]: "a token"})
    _shown_in(snippet, config.model_dump(mode="json"))
    # the comments' defaults: no gate means every tool, no prefix means none
    assert config.upstreams["billing"].gate == ["*"]
    assert config.upstreams["files"].prefix == ""


# -- the Python of the pages (the framework guides' runs in tests/e2e) -----------------------


async def test_python_sample_hash_is_the_bots(bot: DocHarness, tmp_path: Path) -> None:
    [block] = [b for b in of_kind("python") if "rfc8785.dumps" in b.text]
    resource = await submit_as_readme(bot, tmp_path)
    namespace: dict[str, Any] = {"arguments": resource["tool"]["arguments"]}
    run_sample(block, namespace)
    assert namespace["digest"] == resource["arguments_sha256"]


async def test_python_sample_verifier_accepts_the_bots_callback(
    bot: DocHarness, tmp_path: Path
) -> None:
    [block] = [b for b in of_kind("python") if "def verify(" in b.text]
    resource = await submit_as_readme(bot, tmp_path)
    await approve(bot, resource["approval_id"])
    [callback] = await bot.receiver.wait_delivered()
    namespace: dict[str, Any] = {}
    run_sample(block, namespace)
    verify = namespace["verify"]
    assert verify(DEV_SIGNING.encode(), callback.body, callback.signature) is True
    assert verify(DEV_SIGNING.encode(), callback.body + b" ", callback.signature) is False
    assert verify(b"another secret", callback.body, callback.signature) is False


def test_every_readme_python_sample_has_a_test() -> None:
    needles = ("rfc8785.dumps", "def verify(")
    for block in of_kind("python"):
        assert sum(n in block.text for n in needles) == 1, f"{block.id}: no test runs it"
