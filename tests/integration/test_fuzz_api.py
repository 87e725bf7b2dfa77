"""Schemathesis fuzzes the running bot from its own OpenAPI document (bot/openapi.py).

The bot runs on loopback with real PostgreSQL and the Slack stand-in (the integration harness),
on an event loop of its own in a thread, so that schemathesis calls it over HTTP as any agent
would. Every operation gets a bounded number of seeded, derandomized examples (junk and
well-formed alike), sent one at a time with the agent's bearer token, and every answer is held
to the contract:

- never a 5xx;
- the status is documented and the body matches its schema (every 4xx: the error body);
- a request that was refused left no row in any table.

A second test draws only well-formed bodies and requires them to be accepted. The number of
requests tried is printed at the end of the module (and recorded per test as ``requests``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections import Counter
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import asyncpg
import jsonschema
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from approvals import hashing, models
from bot import app as bot_app
from bot import openapi
from tests.support.harness import AGENT_TOKEN, Harness

T = TypeVar("T")
Case = schemathesis.Case[Any]  # of any operation

SEED = 8  # any fixed number: the same requests on every run and in CI
EXAMPLES = 60  # per operation, in the fuzzing phase (the coverage phase adds its edge cases)
TABLES = ("approvals", "outbox", "timers", "attempts", "settlements", "turn_verdicts")
ROWS_SQL = "SELECT " + ", ".join(f"(SELECT count(*) FROM {t})" for t in TABLES)
# the background workers stay off: an outbox row or a settlement written by the relay or an
# expiry between two counts would be blamed on the request in between
FUZZ_WORKERS = bot_app.Workers(run=False, lookup_ttl=0.0)


def _config(mode: str, checks: list[str]) -> schemathesis.Config:
    return schemathesis.Config.from_dict(
        {
            "seed": SEED,
            "generation": {
                "mode": mode,
                "max-examples": EXAMPLES,
                "deterministic": True,  # derandomized: no example database, no fresh seed
                "database": "none",
                # NUL is said in words in the document; the junk has it, the well-formed not
                "allow-x00": mode != "positive",
            },
            # the document has no examples; stateful sequences would blur the row counts
            "phases": {"examples": {"enabled": False}, "stateful": {"enabled": False}},
            "auth": {"openapi": {"agentToken": {"bearer": AGENT_TOKEN}}},
            "checks": {"enabled": False, **{name: {"enabled": True} for name in checks}},
            "request-timeout": 10,
            # show a finding's values as sent (session ids are no secret; the token is a test's)
            "output": {"sanitization": {"enabled": False}},
        }
    )


CONTRACT_CHECKS = [
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_schema_conformance",
    "ignored_auth",  # the same request without the token, or with a wrong one, is a 401
]


def _document() -> dict[str, Any]:
    # a copy: the loader rewrites the dict it is given
    loaded: dict[str, Any] = json.loads(openapi.render())
    return loaded


schema = schemathesis.openapi.from_dict(_document(), config=_config("all", CONTRACT_CHECKS))
well_formed = schemathesis.openapi.from_dict(
    _document(), config=_config("positive", [*CONTRACT_CHECKS, "positive_data_acceptance"])
).include(method="POST", path_regex=r"^/v1/(approvals|turns)$")


# -- the bot under fuzz --------------------------------------------------------------------------


@dataclass
class Known:
    """Ids that exist in the fuzzed bot's database, so paths reach real approvals and sessions."""

    settled: str = ""
    pending: str = ""
    session_id: str = ""


KNOWN = Known()  # refreshed by the bot fixture before each test draws its first example
TRIED: Counter[str] = Counter()  # requests sent, by operation (checks' own probes included)
ANSWERED: Counter[int] = Counter()  # the same requests, by the status they were answered with


class BotThread:
    """The harness on an event loop of its own: schemathesis's calls are synchronous."""

    def __init__(self, database_url: str) -> None:
        self.harness = Harness(database_url=database_url, workers=FUZZ_WORKERS)
        self._loop = asyncio.new_event_loop()
        # a daemon: a start that failed half-way must not keep pytest from exiting
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="fuzzed-bot", daemon=True
        )
        self._started = False
        self._rows: asyncpg.Connection | None = None
        self.http = requests.Session()

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result(timeout=30)

    def start(self) -> BotThread:
        self._thread.start()
        self.run(self.harness.start())
        self._started = True
        self._rows = self.run(asyncpg.connect(self.harness.database_url))
        self.run(self._seed())
        return self

    async def _seed(self) -> None:
        settled = await self.harness.submit(request_id="seed-settled")
        KNOWN.settled = settled["approval_id"]
        status, _ = await self.harness.call("POST", f"/v1/approvals/{KNOWN.settled}/cancel")
        assert status == 200
        KNOWN.pending = (await self.harness.submit(request_id="seed-pending"))["approval_id"]
        KNOWN.session_id = "seed-session"
        turn = {
            "session_id": KNOWN.session_id,
            "request_id": "seed-turn",
            "channel": "whatsapp",
            "lead": {"id": "lead-1"},
            "tool": {"name": "send_proposal", "call_id": "seed-call"},
        }
        status, _ = await self.harness.call("POST", "/v1/turns", json_body=turn)
        assert status == 200

    def rows(self) -> dict[str, int]:
        assert self._rows is not None
        counts = self.run(self._rows.fetchrow(ROWS_SQL))
        assert counts is not None
        return dict(zip(TABLES, counts, strict=True))

    def stop(self) -> None:
        self.http.close()
        if self._rows is not None:
            self.run(self._rows.close())
        if self._started:
            self.run(self.harness.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


@pytest.fixture
def bot(database_url: str) -> Iterator[BotThread]:
    running = BotThread(database_url)
    try:
        yield running.start()
    finally:
        running.stop()


# the module's count of requests covers all its tests: on one worker under pytest-xdist
pytestmark = pytest.mark.xdist_group("fuzz_api")


@pytest.fixture(scope="module", autouse=True)
def _report_requests(
    request: pytest.FixtureRequest, record_testsuite_property: Any
) -> Iterator[None]:
    """After the module: the number of requests tried, on the terminal and in the JUnit XML."""
    yield
    total = sum(TRIED.values())
    if not total:
        return
    record_testsuite_property("fuzz_requests", total)
    by_operation = ", ".join(f"{label}: {n}" for label, n in sorted(TRIED.items()))
    by_status = ", ".join(f"{status}: {n}" for status, n in sorted(ANSWERED.items()))
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():  # as capsys.disabled(), module-wide
            reporter.write_line(f"\nfuzz: {total} requests to the bot ({by_operation})")
            reporter.write_line(f"fuzz: answered {by_status}")


# -- generation hooks ------------------------------------------------------------------------------


def _known_ids(label: str) -> list[str]:
    if label.startswith("GET /v1/approvals/{approval_id}") and not label.endswith("/events"):
        return [KNOWN.settled]  # a long-poll on a pending one would wait out its whole budget
    return [KNOWN.settled, KNOWN.pending]


@schema.hook
def flatmap_path_parameters(
    context: schemathesis.HookContext, path_parameters: dict[str, Any] | None
) -> st.SearchStrategy[dict[str, Any] | None]:
    """The drawn approval id, or one that exists: the handlers behind the 404 get fuzzed too."""
    if context.operation is None or not isinstance(path_parameters, dict):
        return st.just(path_parameters)  # an operation without an approval id in its path
    known = [{**path_parameters, "approval_id": i} for i in _known_ids(context.operation.label)]
    return st.sampled_from([path_parameters, *known])


@schema.hook
def flatmap_query(
    context: schemathesis.HookContext, query: dict[str, Any] | None
) -> st.SearchStrategy[dict[str, Any] | None]:
    if context.operation is None or context.operation.label != "GET /v1/turns" or query is None:
        return st.just(query)
    return st.sampled_from([query, {**query, "session_id": KNOWN.session_id}])


@schema.hook
def after_call(
    context: schemathesis.HookContext, case: Case, response: schemathesis.Response
) -> None:
    TRIED[case.operation.label] += 1
    ANSWERED[response.status_code] += 1


@well_formed.hook("after_call")
def _count_well_formed(
    context: schemathesis.HookContext, case: Case, response: schemathesis.Response
) -> None:
    TRIED[f"well-formed {case.operation.label}"] += 1
    ANSWERED[response.status_code] += 1


# -- what JSON Schema cannot say, the well-formed generator does ---------------------------------


def _within_i_json(value: Any) -> Any:
    """Integers clamped to ±(2^53 − 1): the document says the limit in words only."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return max(-hashing.MAX_SAFE_INTEGER, min(hashing.MAX_SAFE_INTEGER, value))
    if isinstance(value, dict):
        return {key: _within_i_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_within_i_json(item) for item in value]
    return value


def _identifier(value: Any, tag: str) -> Any:
    """Ids are stripped before they are checked: keep one that is not blank, and give it a tag
    unique to the body, so that two different bodies never share ids (a 409, rightly)."""
    if not isinstance(value, str):
        return value
    kept = value.strip() or "id"
    if kept.startswith(models.TURN_REQUEST_PREFIX):  # reserved for a turn's escalation
        kept = "x" + kept
    return f"{kept[:180]}-{tag}"


def _with_identity(person: Any) -> None:
    """A requester or operator needs an identity that is not null (said in words)."""
    if not isinstance(person, dict):
        return
    for key in ("slack_user_id", "email"):
        if person.get(key, "") is None:
            del person[key]
    if "slack_user_id" not in person and "email" not in person:
        person["email"] = "someone@example.com"


def well_formed_body(body: Any) -> Any:
    """A body the contract accepts: I-JSON numbers, no callback (its host would have to be on
    the agent's allow-list), ids that are not blank and are unique to the content, people with
    an identity."""
    if not isinstance(body, dict):
        return body
    body = _within_i_json(body)
    body.pop("callback_url", None)
    if isinstance(body.get("expires_in"), float):  # JSON Schema's integer takes 60.0; strict
        body["expires_in"] = max(1, int(body["expires_in"]))  # pydantic does not
    tag = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:12]
    body["request_id"] = _identifier(body.get("request_id"), tag)
    body["session_id"] = _identifier(body.get("session_id"), tag)
    tool = body.get("tool")
    if isinstance(tool, dict):
        tool["call_id"] = _identifier(tool.get("call_id"), tag)  # a turn escalates per call id
    for person in ("requester", "operator"):
        _with_identity(body.get(person))
    lead = body.get("lead")
    if isinstance(lead, dict):
        lead["id"] = _identifier(lead.get("id"), tag)
    return body


# -- the tests -------------------------------------------------------------------------------------

ERROR_SCHEMA = jsonschema.Draft202012Validator(
    {"$ref": "#/components/schemas/ErrorBody", **openapi.document()}
)


def _refused_leaves_no_row(
    bot: BotThread, case: Case, before: dict[str, int], response: Any
) -> None:
    after = bot.rows()
    left = {t: after[t] - before[t] for t in TABLES if after[t] != before[t]}
    assert not left, (
        f"{case.method} {case.formatted_path} query={case.query!r} body={case.body!r} was "
        f"refused with {response.status_code} {response.text[:300]} but changed rows: {left}"
    )


# one bot per operation, shared by its examples: each example's rows are counted around it
ONE_BOT_PER_OPERATION = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


@schema.parametrize()
@ONE_BOT_PER_OPERATION
def test_fuzzed_requests_keep_the_contract(
    case: Case, bot: BotThread, record_property: Any
) -> None:
    before = bot.rows()
    response = case.call(base_url=bot.harness.base_url, session=bot.http)
    case.validate_response(response)
    if 400 <= response.status_code < 500:
        ERROR_SCHEMA.validate(response.json())
        _refused_leaves_no_row(bot, case, before, response)
    record_property("requests", TRIED[case.operation.label])


@well_formed.parametrize()
@ONE_BOT_PER_OPERATION
def test_well_formed_bodies_are_accepted(case: Case, bot: BotThread, record_property: Any) -> None:
    # made well-formed here, not in a generation hook: hooks do not reach the coverage phase
    case.body = well_formed_body(case.body)
    before = bot.rows()
    response = case.call(base_url=bot.harness.base_url, session=bot.http)
    case.validate_response(response)  # positive_data_acceptance: a 2xx
    created = bot.rows()["approvals"] - before["approvals"]
    if case.path == "/v1/approvals":
        # a new approval exactly when 201 (200: the same body again, its approval returned)
        assert created == (1 if response.status_code == 201 else 0), response.text[:300]
    record_property("requests", TRIED[f"well-formed {case.operation.label}"])


# -- what the fuzz found, pinned (seed-independent) --------------------------------------------


@pytest.mark.parametrize("session_id", ["%00", "seed%00session"])
async def test_a_session_query_with_nul_is_refused_not_a_500(
    harness: Harness, session_id: str
) -> None:
    # found with seeds 2 and 4: PostgreSQL text cannot hold NUL, and the query string reached
    # the store unchecked (asyncpg CharacterNotInRepertoireError, a 500)
    status, body = await harness.call("GET", f"/v1/turns?session_id={session_id}")
    assert status == 422, body
    assert [f["field"] for f in body["error"]["fields"]] == ["session_id"]
