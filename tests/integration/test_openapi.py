"""The OpenAPI 3.1 document of wire contract v1: valid, served without a token, committed without
drift, covering every agent route, and true of the answers the running bot gives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import jsonschema_rs
import pytest
from pydantic import BaseModel, ValidationError

# the OpenAPI 3.1 meta-schema, as schemathesis ships it (no network needed to fetch it)
from schemathesis.specs.openapi.definitions import OPENAPI_31

import countersign_client
from approvals import models
from bot import openapi
from tests.support.harness import FINANCE, REQUESTER, Harness

COMMITTED = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
REGENERATE = "make openapi  (or: python -m bot.openapi > docs/openapi.json)"


def conforms(answer: Any, model: str) -> None:
    """``answer`` matches the document's schema of ``model`` (refs resolved in the document)."""
    schema = {"$ref": f"#/components/schemas/{model}", **openapi.document()}
    jsonschema.Draft202012Validator(schema).validate(answer)


def test_document_is_valid_openapi_3_1() -> None:
    validator = jsonschema.Draft202012Validator(OPENAPI_31)
    problems = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(openapi.document())]
    assert problems == []
    for schema in openapi.document()["components"]["schemas"].values():
        jsonschema.Draft202012Validator.check_schema(schema)


def test_meta_schema_catches_a_broken_document() -> None:
    # the check above is not vacuous: a response without its description is refused
    broken = {**openapi.document(), "paths": {"/v1/x": {"get": {"responses": {"200": {}}}}}}
    assert not jsonschema.Draft202012Validator(OPENAPI_31).is_valid(broken)


def test_committed_document_is_the_generated_one() -> None:
    assert COMMITTED.exists(), f"docs/openapi.json is missing; write it with: {REGENERATE}"
    committed = COMMITTED.read_text("utf-8")
    assert committed == openapi.render(), (
        "docs/openapi.json no longer matches the models it is generated from; "
        f"regenerate it with: {REGENERATE}"
    )


async def test_every_agent_route_is_documented(harness: Harness) -> None:
    _, runner, store = await harness.serve_bot(workers=False)
    try:
        routed = {
            (route.method.lower(), route.resource.canonical)
            for route in runner.app.router.routes()
            if route.resource is not None
            and route.resource.canonical.startswith("/v1/")
            and route.method != "HEAD"  # aiohttp adds HEAD beside each GET
        }
    finally:
        await runner.cleanup()
        await store.close()
    documented = {
        (method, path) for path, item in openapi.document()["paths"].items() for method in item
    }
    assert routed == documented


async def test_served_without_a_token(harness: Harness) -> None:
    status, served = await harness.call("GET", "/v1/openapi.json", token=None)
    assert status == 200
    assert served == openapi.document()
    assert served["openapi"] == "3.1.0"


def test_request_bodies_come_from_the_validating_models() -> None:
    document = openapi.document()
    body = document["paths"]["/v1/approvals"]["post"]["requestBody"]
    assert body["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ApprovalRequest"
    }
    schemas = document["components"]["schemas"]
    required = ["request_id", "session_id", "tool", "requester"]
    assert schemas["ApprovalRequest"]["required"] == required
    assert schemas["ApprovalRequest"]["additionalProperties"] is False
    assert schemas["CancelRequest"]["properties"]["reason"]["anyOf"][0]["maxLength"] == 2000
    assert "funnel" in schemas["TurnRequest"]["properties"]
    # the bearer token is required everywhere but on the document itself
    assert document["security"] == [{"agentToken": []}]
    assert document["components"]["securitySchemes"]["agentToken"]["scheme"] == "bearer"
    assert document["paths"]["/v1/openapi.json"]["get"]["security"] == []


@pytest.mark.parametrize(
    ("requester", "valid"),
    [
        ({"slack_user_id": "U0REQ"}, True),
        ({"email": "rita@example.com", "name": "Rita"}, True),
        ({"name": "Rita"}, False),  # no identity: four eyes could not be checked
        ({}, False),
    ],
)
def test_document_says_a_requester_needs_an_identity(
    requester: dict[str, str], valid: bool
) -> None:
    schema = {"$ref": "#/components/schemas/Requester", **openapi.document()}
    assert jsonschema.Draft202012Validator(schema).is_valid(requester) is valid


@pytest.mark.parametrize(
    "email",
    [
        "rita@example.com",
        "rita@exa mple.com",
        "rita@example.com\x85",  # NEL: whitespace to the server's regex, not to ECMA-262's
        "rita@example.com\ufeff",  # BOM: whitespace to ECMA-262's, not to the server's
        "rita@example.com\u00a0",
    ],
)
def test_document_and_server_agree_on_emails(email: str) -> None:
    # found by the well-formed fuzz (seeds 3 and 8): JSON Schema patterns are ECMA-262
    # regexes (jsonschema_rs follows them; python-jsonschema uses Python's re), pydantic's are
    # Rust's, and the two disagree on which characters \s matches
    schema = {"$ref": "#/components/schemas/Requester", **openapi.document()}
    documented = jsonschema_rs.is_valid(schema, {"email": email})
    try:
        models.Requester(email=email)
        accepted = True
    except ValidationError:
        accepted = False
    assert documented == accepted


def test_every_operation_documents_auth_and_its_error_shape() -> None:
    error = {"$ref": "#/components/schemas/ErrorBody"}
    for path, item in openapi.document()["paths"].items():
        if path == "/v1/openapi.json":
            continue
        for method, operation in item.items():
            responses = operation["responses"]
            assert "401" in responses, (method, path)
            for status, response in responses.items():
                if status.startswith("4"):
                    assert response["content"]["application/json"]["schema"] == error
            if "requestBody" in operation:
                assert {"400", "413", "415", "422"} <= responses.keys(), (method, path)


async def test_answers_of_the_running_bot_match_the_document(harness: Harness) -> None:
    """Pending, settled, the audit, a turn's verdict and history, and errors: each answer the
    bot gives is what the document says (the fuzz only reaches what an agent alone can do)."""
    created = await harness.submit()
    conforms(created, "ApprovalResource")
    approval_id = created["approval_id"]

    await harness.card_ts(approval_id)
    await harness.click(REQUESTER, approval_id)  # refused (self): an attempt in the audit
    assert await harness.click(FINANCE[0], approval_id) == 200
    status, settled = await harness.call("GET", f"/v1/approvals/{approval_id}?wait=5")
    assert status == 200
    assert settled["status"] == "approved"
    assert settled["decided_by"][0]["slack_user_id"] == FINANCE[0].id
    conforms(settled, "ApprovalResource")

    status, audit = await harness.call("GET", f"/v1/approvals/{approval_id}/events")
    assert status == 200
    assert [e["kind"] for e in audit["events"]] == ["created", "attempt", "attempt", "settlement"]
    conforms(audit, "ApprovalEvents")

    # a required deny reason and several roles show up in "required"
    denied = await harness.submit(
        request_id="del-1",
        tool={"name": "delete_customer", "call_id": "c-del", "arguments": {"id": 7}},
        framework="ag-ui",
    )
    assert denied["required"].get("deny_reason") is True
    conforms(denied, "ApprovalResource")
    status, cancelled = await harness.call(
        "POST", f"/v1/approvals/{denied['approval_id']}/cancel", json_body={"reason": "moot"}
    )
    assert status == 200
    conforms(cancelled, "ApprovalResource")

    turn = {
        "session_id": "wa-1",
        "request_id": "turn-1",
        "channel": "whatsapp",
        "lead": {"id": "lead-42"},
        "operator": {"slack_user_id": "U0OPER"},
        "funnel": {"stage": "qualified"},
        "tool": {"name": "grant_discount", "call_id": "call-9", "arguments": {"discount_pct": 15}},
    }
    status, verdict = await harness.call("POST", "/v1/turns", json_body=turn)
    assert status == 200
    assert verdict["verdict"] == "escalate", verdict
    conforms(verdict, "TurnVerdict")
    status, history = await harness.call("GET", "/v1/turns?session_id=wa-1")
    assert status == 200
    assert len(history["turns"]) == 1
    conforms(history, "TurnHistory")

    for method, path, body, expected in [
        ("POST", "/v1/approvals", {"request_id": 1}, 422),
        ("GET", "/v1/approvals/apr_000000000000000000000000", None, 404),
        ("POST", f"/v1/approvals/{approval_id}/cancel", None, 409),
        ("GET", "/v1/turns", None, 422),
    ]:
        status, error = await harness.call(method, path, json_body=body)
        assert status == expected, (method, path, error)
        conforms(error, "ErrorBody")
    status, error = await harness.call("GET", f"/v1/approvals/{approval_id}", token=None)
    assert status == 401
    conforms(error, "ErrorBody")


def test_an_undocumented_answer_field_is_caught() -> None:
    # the answer models forbid unknown keys, so a field added to approvals/resource.py but not to
    # the contract fails the conformance checks above and in the fuzz
    answer = {"error": {"code": "not_found", "message": "no", "fields": [], "hint": "undocumented"}}
    with pytest.raises(jsonschema.ValidationError):
        conforms(answer, "ErrorBody")


# the client's typed view of each answer, and the document's schema of it: the client may not
# import the server, so its models spell the contract again, and this keeps the two in step
CLIENT_VIEWS: dict[type[BaseModel], str] = {
    countersign_client.Approval: "ApprovalResource",
    countersign_client.ToolCall: "ResourceTool",
    countersign_client.Requester: "ResourceRequester",
    countersign_client.models.Decider: "DecidedBy",
    countersign_client.Execution: "ResourceExecution",
    countersign_client.ExecutionOutcome: "ResourceOutcome",
}


@pytest.mark.parametrize("view", list(CLIENT_VIEWS), ids=lambda view: view.__name__)
def test_the_clients_models_read_only_documented_fields(view: type[BaseModel]) -> None:
    schema = openapi.document()["components"]["schemas"][CLIENT_VIEWS[view]]
    documented, required = set(schema["properties"]), set(schema.get("required", ()))
    assert set(view.model_fields) <= documented
    # what the client cannot do without, the server always sends
    assert {name for name, f in view.model_fields.items() if f.is_required()} <= required


def test_module_writes_the_document(capsys: pytest.CaptureFixture[str]) -> None:
    openapi.main()
    assert json.loads(capsys.readouterr().out) == openapi.document()
