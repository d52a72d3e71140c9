"""The report of ``benchmarks/evidence/gate.py ct`` (docs/results.md, the continuous-training
gate): per market and gate, promotions a year, alias moves, tests, how soon the first
promotion came and what it earned after; what the challengers' pool could earn; and its plot."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.evidence.gate_sim import NIGHTS, union_bound
from benchmarks.evidence.results_report import paired


def _median(values: list[int]) -> str:
    return f"{statistics.median(values):.0f}" if values else "-"


def ct_table(result: dict[str, Any]) -> str:
    """Per market and gate: promotions a year, alias moves, the looks, how soon and how good."""
    alpha = result["config"]["gate_alpha"]
    head = ("| market | gate | years | promotions a year: mean | max | years ≥ 2 | champion moves | shadow moves "
            "| tests a year | α × 252 / shadow_bars | nights to first promotion: median | years with none "
            "| first champion's edge after its promotion (t) |")
    lines = [head, "|---" * 13 + "|"]
    for market in dict.fromkeys(r["market"] for r in result["rows"]):
        rows = [r for r in result["rows"] if r["market"] == market]
        for name in rows[0]["years"]:
            years = [r["years"][name] for r in rows]
            counts = [len(y["promotions"]) for y in years]
            firsts = [y["promotions"][0]["night"] + 1 for y in years if y["promotions"]]
            edges = [y["promotions"][0]["edge"] for y in years if y["promotions"] and y["promotions"][0]["edge"]
                     is not None]
            every = name.split()[-1]
            bound = f"{union_bound(alpha, int(every)):.2f}" if name.startswith("shipped") else "-"
            tests = f"{statistics.fmean(y['tests'] for y in years):.1f}" if name != "point" else f"{NIGHTS}"
            lines.append(f"| {market} | {name} | {len(years)} | {statistics.fmean(counts):.2f} | {max(counts)} "
                         f"| {sum(c >= 2 for c in counts)} | {sum(counts)} | {sum(y['shadow_moves'] for y in years)} "
                         f"| {tests} | {bound} | {_median(firsts)} | {len(years) - len(firsts)} | {paired(edges)} |")
    return "\n".join(lines)


def pool_lines(result: dict[str, Any]) -> list[str]:
    """What the challengers could earn: each pool rule's Sharpe minus buy-and-hold's over the year."""
    lines = []
    for market in dict.fromkeys(r["market"] for r in result["rows"]):
        edges = [[e for e in r["pool_edge"].values()] for r in result["rows"] if r["market"] == market]
        means = [statistics.fmean(e) for e in edges]
        best = [max(e) for e in edges]
        lines.append(f"{market}: the pool's rules over the year, Sharpe − buy-and-hold's: mean rule {paired(means)}, "
                     f"best rule {paired(best)} (over seeds)")
    return lines


def ct_report(result: dict[str, Any]) -> str:
    c = result["config"]
    seconds = [r["total_seconds"] for r in result["rows"]]
    variants = len(result["rows"][0]["years"])
    return "\n".join([
        f"Command: `{result['command']}`", "",
        f"{NIGHTS} nights a year; eval_bars {c['eval_bars']}, gate_alpha {c['gate_alpha']}, gate_margin "
        f"{c['gate_margin']}, gate_resamples {c['gate_resamples']}"
        + ("" if c["resamples_shipped"] else " (NOT the shipped count)")
        + f"; challengers from {c['pool']} momentum rules. Window arms are slices of whole-period curves: the "
          "entry cost a freshly started model pays at each window's start is ignored.", "",
        ct_table(result), "", *pool_lines(result), "",
        f"Seconds per market-seed (build, {variants} gates, shared tests): median {statistics.median(seconds):.0f}, "
        f"max {max(seconds):.0f}; per gate-year {statistics.median(seconds) / variants:.1f} "
        f"over {len(seconds)} market-seeds."])


def ct_plot(result: dict[str, Any], path: Path) -> None:  # pragma: no mutate block (a picture)
    """Per gate: promotions per null year, and nights to the first promotion on the learnable market."""
    from matplotlib.figure import Figure

    rows = result["rows"]
    names = list(rows[0]["years"])
    fig = Figure(figsize=(12, 4.5))
    left, right = fig.subplots(1, 2)
    rng = np.random.default_rng(0)
    for x, name in enumerate(names):
        null = [len(r["years"][name]["promotions"]) for r in rows if r["market"] == "null"]
        if null:
            left.scatter(x + rng.uniform(-0.2, 0.2, len(null)), null, s=14, alpha=0.6, color="tab:red")
            left.plot([x - 0.3, x + 0.3], [statistics.fmean(null)] * 2, color="black")
        firsts = [r["years"][name]["promotions"][0]["night"] + 1 if r["years"][name]["promotions"] else NIGHTS + 20
                  for r in rows if r["market"] == "learnable"]
        if firsts:
            right.scatter(x + rng.uniform(-0.2, 0.2, len(firsts)), firsts, s=14, alpha=0.6, color="tab:blue")
    for ax, title, label in ((left, "null market: promotions per simulated year", "promotions (bar: mean)"),
                             (right, "learnable market: nights to the first promotion",
                              f"night (above the line: none in {NIGHTS})")):
        ax.set_xticks(range(len(names)), names, rotation=45, ha="right")
        ax.set_title(title)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    right.axhline(NIGHTS + 10, color="gray", lw=0.5)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
