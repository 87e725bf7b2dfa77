"""The gateway's pure parts, without processes: its file, the request ids that let a retry and
a restarted gateway find their approval, what is refused before anything is submitted, and the
command's arguments. (Here rather than in tests/unit: they import the mcp extra.)"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from countersign_client.gateway import config as gateway_config
from countersign_client.gateway.config import ConfigError, GatewayConfig
from countersign_client.gateway.gate import Gate, request_id_for
from countersign_client.gateway.main import parse_http
from tests.bench import mcp_gateway as mcp_gateway_bench

GOOD: dict[str, Any] = {
    "countersign": {"url": "http://127.0.0.1:3000", "token_env": "COUNTERSIGN_AGENT_TOKEN"},
    "requester": {"slack_user_id": "U0REQ"},
    "upstreams": {
        "files": {"command": ["python", "files_server.py"], "gate": ["write_*", "delete_*"]},
        "billing": {"url": "http://127.0.0.1:9000/mcp", "prefix": "billing_"},
    },
}


def load(tmp_path: Path, data: Any, env: dict[str, str] | None = None) -> GatewayConfig:
    path = tmp_path / "gateway.yml"
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return gateway_config.load(path, env or {})


def problems(tmp_path: Path, data: Any, env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as refused:
        load(tmp_path, data, env)
    return refused.value.problems


def test_the_issues_example_loads_with_its_defaults(tmp_path: Path) -> None:
    config = load(tmp_path, GOOD)
    assert config.upstreams["billing"].gate == ["*"]  # default: every tool gated
    assert config.upstreams["files"].prefix == ""
    assert config.http.allowed_origins == []
    assert config.token({"COUNTERSIGN_AGENT_TOKEN": "t"}) == "t"
    with pytest.raises(ConfigError, match="COUNTERSIGN_AGENT_TOKEN is not set"):
        config.token({})


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda d: d["upstreams"]["files"].update(gates=["x"]), "upstreams.files.gates"),
        (lambda d: d["upstreams"]["files"].update(url="http://x/mcp"), "exactly one of command"),
        (lambda d: d["upstreams"]["billing"].pop("url"), "exactly one of command"),
        (lambda d: d["upstreams"]["files"].update(command=[]), "upstreams.files.command"),
        (lambda d: d["upstreams"]["billing"].update(url="ftp://x"), "http:// or https://"),
        (lambda d: d["upstreams"]["billing"].update(prefix="a b"), "upstreams.billing.prefix"),
        (lambda d: d.update(requester={"name": "Rita"}), "needs slack_user_id or email"),
        (lambda d: d["countersign"].update(url="localhost:3000"), "countersign.url"),
        (lambda d: d.update(upstreams={}), "upstreams"),
        (lambda d: d.update(approvals={"progress_every": 0}), "approvals.progress_every"),
        (lambda d: d.update(approvals={"max_argument_bytes": 10**6}), "max_argument_bytes"),
    ],
)
def test_a_wrong_key_is_named(tmp_path: Path, change: Any, expected: str) -> None:
    data = yaml.safe_load(yaml.safe_dump(GOOD))
    change(data)
    assert any(expected in problem for problem in problems(tmp_path, data))


def test_variables_the_file_names_must_be_set(tmp_path: Path) -> None:
    data = yaml.safe_load(yaml.safe_dump(GOOD))
    data["upstreams"]["billing"]["headers_env"] = {"Authorization": "BILLING_AUTH"}
    data["http"] = {"token_env": "GATEWAY_TOKEN"}
    assert problems(tmp_path, data) == [
        "upstreams.billing.headers_env.Authorization: BILLING_AUTH is not set",
        "http.token_env: GATEWAY_TOKEN is not set",
    ]
    assert load(tmp_path, data, {"BILLING_AUTH": "Bearer x", "GATEWAY_TOKEN": "y"})


def test_not_yaml_or_not_a_mapping_is_said_so(tmp_path: Path) -> None:
    assert "not YAML" in problems(tmp_path, "countersign: [")[0]
    assert "must be a mapping" in problems(tmp_path, "- a list")[0]


def test_request_ids_are_stable_and_tell_apart_what_differs() -> None:
    one = request_id_for("s1", "write_note", "a" * 64, 0)
    assert one == request_id_for("s1", "write_note", "a" * 64, 0)  # a retry, a restart
    others = {
        request_id_for("s2", "write_note", "a" * 64, 0),
        request_id_for("s1", "delete_note", "a" * 64, 0),
        request_id_for("s1", "write_note", "b" * 64, 0),
        request_id_for("s1", "write_note", "a" * 64, 1),  # the next call with the same
    }
    assert one not in others
    assert len(others) == 4
    assert len(one) <= 200  # the wire contract's identifier limit


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"n": math.nan}, "not I-JSON"),
        ({"n": math.inf}, "not I-JSON"),
        ({"n": 2**53 + 1}, "not I-JSON"),
        ({"s": "\ud800"}, "not I-JSON"),
        ({"nested": [{"deep": [2**64]}]}, "not I-JSON"),
        ({"text": "x" * 600}, "over the gateway's limit of 512"),
    ],
)
def test_what_cannot_be_bound_is_refused_before_submitting(
    tmp_path: Path, arguments: dict[str, Any], expected: str
) -> None:
    data = yaml.safe_load(yaml.safe_dump(GOOD))
    data["approvals"] = {"max_argument_bytes": 512}
    gate = Gate(load(tmp_path, data), "token")
    refusal = gate.refusal(arguments)
    assert refusal is not None
    assert expected in refusal
    assert "nothing was submitted" in refusal
    assert gate.refusal({"text": "x" * 400, "n": 2**53 - 1, "f": 1e300}) is None


def test_http_addresses() -> None:
    assert parse_http("8080") == ("127.0.0.1", 8080)
    assert parse_http("0.0.0.0:9") == ("0.0.0.0", 9)  # noqa: S104 - told otherwise, on purpose
    assert parse_http("[::1]:7") == ("::1", 7)
    for bad in ("host", "host:0", "host:70000", ":x"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_http(bad)


def test_the_gateway_bench_prints_both_transports(capsys: pytest.CaptureFixture[str]) -> None:
    """``make bench``'s gateway phase still runs (a smoke test: figures are printed, never
    judged here)."""
    assert mcp_gateway_bench.main(["--quick"]) == 0
    out = capsys.readouterr().out
    [line] = [json.loads(t) for t in out.splitlines() if t.startswith('{"bench": "mcp_gateway"')]
    for transport in ("stdio", "http"):
        figures = line[transport]
        for key in ("direct_p50_ms", "gateway_p50_ms", "added_p50_ms", "ratio_p50"):
            assert isinstance(figures[key], float), (transport, key)
        assert figures["direct_p50_ms"] > 0
        assert figures["gateway_p50_ms"] > 0
        assert transport in out
