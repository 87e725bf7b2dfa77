"""``make bench`` still runs: every phase of tests/bench/bench.py, as small as it goes.

A smoke test, not a benchmark: it asserts that each phase prints its section and its JSON line
with figures in it, never what the figures are (timings belong to ``make bench``, on a quiet
machine, never to the test suite).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.bench import bench, grants

pytestmark = pytest.mark.timeout(240)  # five phases, three helper processes, real waits

TINY = [
    "--quick",
    "--phases=all",
    "--requests=20",
    "--warmup=5",
    "--levels=1",
    "--level-requests=5",
    "--clicks=3",
    "--burst-clicks=3",
    "--cards-meanwhile=10",
    "--timer-approvals=5",
    "--timer-after=1",
    "--expiry-after=2",
    "--growth-settled=50",
    "--growth-pending=10",
    "--growth-submits=10",
    "--growth-clicks=2",
    "--home-opens=1",
    "--memory-submissions=100",
]


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def test_every_phase_prints_its_figures(
    pg_template: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TEST_DATABASE_URL", pg_template)  # this run's server, not another one
    assert bench.main(TINY) == 0
    out = capsys.readouterr().out
    lines = {}
    for text in out.splitlines():
        if text.startswith("{"):
            line = json.loads(text)
            lines[line["bench"]] = line
    assert list(lines) == [
        "post_approvals",
        "post_approvals_c1",
        "slack_click",
        "slack_click_c3",
        "slack_click_c3_cards",
        "timers",
        "growth",
        "memory",
        "targets",
        "env",
    ]
    for name in ("post_approvals", "post_approvals_c1"):
        targets = lines[name]["targets"]
        assert set(targets) == set(bench.POST_TARGETS)
        assert all(_number(t["rps"]) and _number(t["p99_ms"]) for t in targets.values())
        assert _number(lines[name]["ratio_to_baseline"]["countersign"]["rps"])
    for name in ("slack_click", "slack_click_c3", "slack_click_c3_cards"):
        countersign = lines[name]["targets"]["countersign"]
        assert _number(countersign["ack_p99_ms"])
        assert _number(countersign["callback_p99_ms"])
    for name in ("slack_click_c3", "slack_click_c3_cards"):  # a burst: long-polls answered too
        assert _number(lines[name]["targets"]["countersign"]["wake_p99_ms"])
    assert lines["slack_click_c3_cards"]["targets"]["countersign"]["cards_meanwhile"] == 10
    timers = lines["timers"]
    assert _number(timers["remind_p99_ms"])
    assert _number(timers["expiry_p99_ms"])
    growth = lines["growth"]
    assert set(growth["targets"]) == {"empty", "seeded"}
    assert all(
        _number(growth["ratio_seeded_to_empty"][f])
        for f in ("submit_p99_ms", "settled_p99_ms", "home_p50_ms")
    )
    memory = lines["memory"]
    assert [r["submissions"] for r in memory["readings"]] == [1, 10, 100]
    assert _number(memory["rss_ratio"])
    # the summary: every target read off the run (only c128's, not run here, left out)
    summary = {t["name"]: t for t in lines["targets"]["targets"]}
    assert len(summary) == 13
    assert all(_number(t["figure"]) for t in summary.values()), summary
    assert all(t["verdict"] in ("met", "NOT MET") for t in summary.values())
    assert _number(summary["1 client: submit → 201 p50, the request path"]["figure"])
    assert lines["env"]["quick"] is True
    # the sections a person reads, one per phase
    for heading in ("POST /v1/approvals", "Slack click", "Timers", "Growth", "Memory", "Targets"):
        assert heading in out


def test_the_grants_bench_prints_each_target_and_approves_what_it_should(
    pg_template: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TEST_DATABASE_URL", pg_template)
    assert grants.main(["--quick", "--requests=10", "--level-requests=4", "--warmup=2"]) == 0
    out = capsys.readouterr().out
    lines = [json.loads(t) for t in out.splitlines() if t.startswith('{"bench": "grants')]
    assert [line["bench"] for line in lines] == ["grants_intake_c32", "grants_intake_c1"]
    for line in lines:
        for name in grants.TARGETS:
            assert _number(line[name]["rps"]), name
            assert _number(line[name]["p99_ms"]), name
            assert line[name]["errors"] == 0, name
            # calls the grant and the self-deciding rule approve, all of them; the others none
            assert line[name]["approved_as_expected"], (name, line[name]["approved_at_once"])
    assert [line["grant used"]["approved_at_once"] for line in lines] == [10, 4]
