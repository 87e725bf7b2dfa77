"""The performance targets, each beside its figure and its baseline from one ``make bench`` run.

The phases print their own sections; this is the summary a reader checks first, read off the
JSON lines the phases produced (so it says nothing the sections above it do not). A target whose
phase did not run says so rather than passing. Figures are never asserted: a target not met is
printed as such, and the run still succeeds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Target", "collect", "report"]

Lines = dict[str, dict[str, Any]]


@dataclass(frozen=True)
class Target:
    """One line of the summary: ``figure`` read off the run, met when ``good(figure)``."""

    name: str
    wanted: str  # the target, as a person reads it
    figure: float | None
    unit: str  # "x" (a ratio) or "ms"
    baseline: str  # what the figure is measured against, with its own figure
    good: Callable[[float], bool]

    @property
    def verdict(self) -> str:
        if self.figure is None:
            return "not run"
        return "met" if self.good(self.figure) else "NOT MET"

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "wanted": self.wanted,
            "figure": self.figure,
            "unit": self.unit,
            "baseline": self.baseline,
            "verdict": self.verdict,
        }


def _get(lines: Lines, bench: str, *path: str) -> Any:
    """``lines[bench][path…]``, or None where the run has no such figure."""
    value: Any = lines.get(bench)
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _figure(value: Any, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "x":
        return f"{value:.2f}x"
    return f"{value:.1f} ms" if unit == "ms" else f"{value:.0f}"


def _intake(lines: Lines, bench: str, clients: int) -> list[Target]:
    ratio = _get(lines, bench, "ratio_to_baseline", "countersign/carded") or {}
    cs = _get(lines, bench, "targets", "countersign") or {}
    carded = _get(lines, bench, "targets", "baseline-carded") or {}
    measures = (
        ("rps", "requests/s", "req/s against baseline + card's"),
        ("carded_rps", "cards posted/s", "cards/s against"),
    )
    return [
        Target(
            f"intake, {clients} clients: {what}",
            ">= 1.00x",
            _number(ratio.get(key)),
            "x",
            f"{_figure(_number(cs.get(key)), 'n')} {against} "
            f"{_figure(_number(carded.get(key)), 'n')}",
            lambda r: r >= 1.0,
        )
        for key, what, against in measures
    ]


def _clicks(lines: Lines, bench: str, label: str) -> list[Target]:
    cs = _get(lines, bench, "targets", "countersign") or {}
    p50, p99 = _number(cs.get("callback_p50_ms")), _number(cs.get("callback_p99_ms"))
    alone = _number(_get(lines, "slack_click", "targets", "countersign", "callback_p50_ms"))
    one = f"one click alone: p50 {_figure(alone, 'ms')}"
    return [
        Target(f"{label}: click → callback p50", "< 100 ms", p50, "ms", one, lambda v: v < 100),
        Target(f"{label}: click → callback p99", "< 250 ms", p99, "ms", one, lambda v: v < 250),
        Target(
            f"{label}: long-poll wake p99",
            "< 50 ms",
            _number(cs.get("wake_p99_ms")),
            "ms",
            "settled (decided_at) → long-poll answered",
            lambda v: v < 50,
        ),
    ]


def _alone(lines: Lines) -> list[Target]:
    bench = "post_approvals_c1"
    norelay = _get(lines, bench, "targets", "countersign-norelay", "p50_ms")
    deployed = _get(lines, bench, "targets", "countersign", "p50_ms")
    bare = _get(lines, bench, "targets", "baseline", "p50_ms")
    return [
        Target(
            "1 client: submit → 201 p50, the request path",
            "<= 2.00x",
            _number(_get(lines, bench, "ratio_to_baseline", "countersign-norelay", "p50_ms")),
            "x",
            f"{_figure(_number(norelay), 'ms')} (relay stopped) against the bare INSERT's "
            f"{_figure(_number(bare), 'ms')}; as deployed {_figure(_number(deployed), 'ms')}",
            lambda r: r <= 2.0,
        )
    ]


def _timers(lines: Lines) -> list[Target]:
    return [
        Target(
            f"timers: {what} p99 behind its due time",
            "< 100 ms",
            _number(_get(lines, "timers", key)),
            "ms",
            f"{_get(lines, 'timers', 'approvals')} pending, falling due together",
            lambda v: v < 100,
        )
        for what, key in (("expiry", "expiry_p99_ms"), ("reminder", "remind_p99_ms"))
    ]


def _memory(lines: Lines) -> list[Target]:
    readings = _get(lines, "memory", "readings") or []
    first = readings[0] if readings else {}
    last = readings[-1] if readings else {}
    return [
        Target(
            f"memory: VmRSS after {last.get('submissions', '-')} / after "
            f"{first.get('submissions', '-')} submissions",
            "<= 1.20x",
            _number(_get(lines, "memory", "rss_ratio")),
            "x",
            f"{last.get('VmRSS', '-')} kB against {first.get('VmRSS', '-')} kB, at rest",
            lambda r: r <= 1.2,
        )
    ]


def _growth(lines: Lines) -> list[Target]:
    ratios = _get(lines, "growth", "ratio_seeded_to_empty") or {}
    figures = [v for v in (_number(r) for r in ratios.values()) if v is not None]
    worst = max(ratios, key=lambda k: _number(ratios[k]) or 0.0) if figures else "-"
    return [
        Target(
            "growth: the worst seeded / empty ratio",
            "<= 1.20x",
            max(figures) if figures else None,
            "x",
            f"{worst}, of {len(figures)} figures",
            lambda r: r <= 1.2,
        )
    ]


def collect(
    jsons: Sequence[dict[str, Any]], clients: int, levels: Sequence[int], burst: int
) -> list[Target]:
    """Every target, read off this run's JSON lines (``clients``: the intake's main client
    count, ``levels`` its others; ``burst``: clicks at once)."""
    lines: Lines = {line["bench"]: line for line in jsons if "bench" in line}
    found = _intake(lines, "post_approvals", clients)
    found += [
        target
        for n in levels
        if n not in (1, clients)
        for target in _intake(lines, f"post_approvals_c{n}", n)
    ]
    found += _clicks(lines, f"slack_click_c{burst}", f"{burst} clicks at once")
    found += _clicks(lines, f"slack_click_c{burst}_cards", f"{burst} clicks, cards posting")
    found += _alone(lines) + _timers(lines) + _memory(lines) + _growth(lines)
    return found


def report(
    jsons: Sequence[dict[str, Any]], clients: int, levels: Sequence[int], burst: int, rule: str
) -> dict[str, Any]:
    """Print the summary; its JSON line."""
    found = collect(jsons, clients, levels, burst)
    print("Targets — each figure from this run, beside its baseline")
    print(f"{'target':<50}{'wanted':>10}{'figure':>11}  {'':<8} baseline")
    for t in found:
        print(
            f"{t.name:<50}{t.wanted:>10}{_figure(t.figure, t.unit):>11}  {t.verdict:<8}"
            f" {t.baseline}"
        )
    print(rule)
    return {"bench": "targets", "targets": [t.as_json() for t in found]}
