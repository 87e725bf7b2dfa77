"""The ready-made Prometheus alert rules (``deploy/prometheus``): Prometheus accepts them, their
``promtool`` unit tests see each alert fire and stay quiet, and every series and label they read
is one the bot really exports, so renaming a metric can't leave an alert that never fires."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import metrics as prometheus_metrics
from prometheus_client.parser import text_string_to_metric_families

from approvals import metrics
from tests.support.harness import Harness

RULES_DIR = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
RULES = RULES_DIR / "countersign-alerts.yml"
RULE_TESTS = RULES_DIR / "countersign-alerts.test.yml"

# what Prometheus adds itself: the scrape's own series and the target's labels
PROMETHEUS_SERIES = frozenset({"up"})
TARGET_LABELS = frozenset({"job", "instance"})
# the series each metric type is exposed as (prometheus_client's text format)
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "gauge": ("",),
}
# PromQL words that are neither series nor labels
KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "group_left", "group_right"})
# a whole name (possessive: never a shorter part of one) not called as a function, its matchers
SELECTOR = r"(?<![\w:.])([A-Za-z_:][\w:]*+)\s*+(?:\{([^}]*)\})?(?!\()"

PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="promtool not on PATH (Debian's `prometheus` package has it; .ci/run installs it)",
)


def _promtool(*args: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run(  # noqa: S603 (a fixed tool on files of this repository)
        [PROMTOOL, *args], cwd=RULES_DIR, capture_output=True, text=True, timeout=60, check=False
    )


def _alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text("utf-8"))["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def _selectors(expr: str) -> list[tuple[str, set[str]]]:
    """Each series an expression reads, with the labels its matchers name."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # label values are not names
    expr = re.sub(r"\[[^]]*\]", "", expr)  # range durations
    return [
        (name, set(re.findall(r"([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)", matchers or "")))
        for name, matchers in re.findall(SELECTOR, expr)
        if name not in KEYWORDS
    ]


def _grouping_labels(expr: str) -> set[str]:
    """The labels named by ``by (…)``, ``without (…)``, ``on (…)`` and ``ignoring (…)``."""
    clauses = re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", expr)
    return {label.strip() for clause in clauses for label in clause.split(",") if label.strip()}


def _without_groupings(expr: str) -> str:
    return re.sub(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)", "", expr)


async def _exported_series(harness: Harness) -> dict[str, str]:
    """Every series name the bot's ``/metrics`` exposes, with its family's name."""
    status, text = await harness.call("GET", "/metrics", token=None)
    assert status == 200
    return {
        family.name + suffix: family.name
        for family in text_string_to_metric_families(text)
        for suffix in SUFFIXES.get(family.type, ("",))
    }


def _declared_labels() -> dict[str, set[str]]:
    """The label names of each of the core's metric families, as declared in approvals.metrics
    (a label appears in a scrape only once a value is recorded for it)."""
    declared = (getattr(metrics, name) for name in metrics.__all__)
    return {
        next(iter(wrapper.describe())).name: set(wrapper._labelnames)
        for wrapper in declared
        if isinstance(wrapper, prometheus_metrics.MetricWrapperBase)
    }


@needs_promtool
def test_prometheus_accepts_the_rules() -> None:
    result = _promtool("check", "rules", RULES.name)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_each_alert_fires_and_stays_quiet_as_its_unit_tests_expect() -> None:
    result = _promtool("test", "rules", RULE_TESTS.name)
    assert result.returncode == 0, result.stdout + result.stderr


def _anchors(page: Path) -> set[str]:
    """The anchors of a documentation page's headings, as the site (Python-Markdown's toc) makes
    them: a runbook_url leads to a section that exists."""
    headings = re.findall(r"^#{1,6} (.+)$", page.read_text("utf-8"), re.MULTILINE)
    slugs = (re.sub(r"[^\w\s-]", "", heading).strip().lower() for heading in headings)
    return {re.sub(r"[-\s]+", "-", slug) for slug in slugs}


def test_every_alert_says_how_bad_what_to_do_and_is_unit_tested_both_ways() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text("utf-8"))["tests"]
    cases = [case for test in tests for case in test["alert_rule_test"]]
    for alert in _alerts():
        name = alert["alert"]
        assert alert["labels"]["severity"] in {"critical", "warning"}, name
        assert {"summary", "description", "runbook_url"} <= alert["annotations"].keys(), name
        page, _, anchor = alert["annotations"]["runbook_url"].partition("#")
        assert anchor in _anchors(RULES_DIR.parents[1] / page), (name, page, anchor)
        mine = [case for case in cases if case["alertname"] == name]
        assert any(case.get("exp_alerts") for case in mine), f"{name}: never seen firing"
        assert any(not case.get("exp_alerts") for case in mine), f"{name}: never seen quiet"


async def test_every_series_and_label_the_rules_read_is_exported(harness: Harness) -> None:
    exported = await _exported_series(harness)
    declared = _declared_labels()
    read = 0
    for alert in _alerts():
        expr, name = alert["expr"], alert["alert"]
        selectors = _selectors(_without_groupings(expr))
        allowed = set(TARGET_LABELS)
        for series, matched in selectors:
            read += 1
            if series in PROMETHEUS_SERIES:
                assert matched <= TARGET_LABELS, f"{name}: {series}{{{matched}}}"
                continue
            assert series in exported, f"{name}: the bot exports no series {series}"
            labels = declared.get(exported[series], set()) | TARGET_LABELS
            labels |= {"le"} if series.endswith("_bucket") else set()
            assert matched <= labels, f"{name}: {series} has no label {matched - labels}"
            allowed |= labels
        assert _grouping_labels(expr) <= allowed, f"{name}: groups by a label nothing has"
    assert read >= len(_alerts())
