"""Tables and plots of ``benchmarks/evidence/results.py``'s rows: arms per market, paired differences
per seed with t statistics, the targets, the gate's promotion rate and the
champion's learning curve (``docs/results-tables.md``, ``docs/img/results*.png``)."""

from __future__ import annotations

import math
import statistics
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

ARMS = ("champion", "vanilla", "momentum", "ewm_40 rule", "sr_40 rule", "filter", "oracle", "buy-and-hold")
PAIRS = (("champion", "buy-and-hold"), ("vanilla", "buy-and-hold"), ("momentum", "buy-and-hold"),
         ("ewm_40 rule", "buy-and-hold"), ("sr_40 rule", "buy-and-hold"), ("filter", "buy-and-hold"),
         ("oracle", "buy-and-hold"), ("champion", "vanilla"), ("champion", "momentum"), ("champion", "ewm_40 rule"),
         ("champion", "sr_40 rule"), ("champion", "filter"), ("filter", "momentum"), ("filter", "vanilla"))
COMPUTE = ("champion", "champion 4x", "champion 16x")
"""The compute curve's arms: params.yaml's generations, 4 and 16 times as many (``--compute``)."""
RULE_SLACK = 0.10
"""The champion's edge may trail each rule's (``ewm_40``, ``sr_40``) by at most this (paired by seed)."""
MARKER = "<!-- results.py writes below this line -->"

Rows = list[dict[str, Any]]
# Student's t, two-sided 5% (the 0.975 quantile) for 1..30 degrees of freedom; 1.96 beyond
T_975 = (12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23, 2.20, 2.18, 2.16, 2.14, 2.13,
         2.12, 2.11, 2.10, 2.09, 2.09, 2.08, 2.07, 2.07, 2.06, 2.06, 2.06, 2.05, 2.05, 2.05, 2.04)


def diffs(rows: Rows, market: str, a: str, b: str, metric: str = "sharpe") -> list[float]:
    """Per-seed differences a − b on ``market`` (seeds where both arms ran)."""
    by = {(r["arm"], r["seed"]): r[metric] for r in rows if r["market"] == market}
    return [by[(a, s)] - by[(b, s)] for s in sorted({r["seed"] for r in rows}) if (a, s) in by and (b, s) in by]


def t_stat(values: list[float]) -> float:
    """Mean over its standard error (n − 1 degrees of freedom); NaN below two values."""
    if len(values) < 2:
        return math.nan
    mean, sd = statistics.fmean(values), statistics.stdev(values)
    if sd > 0:
        return mean / (sd / math.sqrt(len(values)))
    return math.copysign(math.inf, mean) if mean else math.nan  # the same difference on every seed


def critical_t(seeds: int) -> float:
    """|t| above which a paired mean over ``seeds`` differs from 0 at 5%, two-sided."""
    if seeds < 2:
        return math.nan
    return T_975[seeds - 2] if seeds - 1 <= len(T_975) else 1.96


def spread(values: list[float]) -> float:
    """The sample standard deviation; 0 for one value."""
    return statistics.stdev(values) if len(values) > 1 else 0.0


def mean_sd(values: list[float]) -> str:
    return f"{statistics.fmean(values):.2f} ± {spread(values):.2f}" if values else "-"


def t_text(values: list[float]) -> str:
    """``t = …`` for per-seed differences, ``+inf`` where every seed differs by the same amount;
    where t is not a number, why: one seed, or no difference on any seed."""
    t = t_stat(values)
    if not math.isnan(t):
        return f"t = {t:+.2f}"
    return "no t: one seed" if len(values) < 2 else "no t: no difference on any seed"


def beats(values: list[float]) -> bool:
    """Whether per-seed differences show an edge beyond noise (t ≥ 2). One seed cannot show its
    absence, so it counts as one (fails closed); no difference on any seed is none."""
    return len(values) < 2 or t_stat(values) >= 2


def paired(values: list[float]) -> str:
    return f"{mean_sd(values)} ({t_text(values)})" if values else "-"


def markets_of(rows: Rows) -> list[str]:
    order = ("learnable", "null", "martingale", "arch-demo")
    return sorted({r["market"] for r in rows}, key=order.index)


def arm_table(rows: Rows, arms: tuple[str, ...] = ARMS + COMPUTE[1:]) -> list[str]:
    lines = ["| market | arm | test Sharpe | test cumulative return | validation fitness | train Sharpe | env steps "
             "| seconds |", "|---|---|---|---|---|---|---|---|"]
    for market in markets_of(rows):
        for arm in arms:
            sub = [r for r in rows if r["market"] == market and r["arm"] == arm]
            if not sub:
                continue
            val = [r["validation"] for r in sub if not math.isnan(r["validation"])]
            on_train = [r["train_sharpe"] for r in sub if not math.isnan(r.get("train_sharpe", math.nan))]  # older: -
            lines.append(f"| {market} | {arm} | {mean_sd([r['sharpe'] for r in sub])} | "
                         f"{mean_sd([r['cumulative_return'] for r in sub])} | {mean_sd(val)} | {mean_sd(on_train)} | "
                         f"{int(statistics.fmean(r['env_steps'] for r in sub)):,} | "
                         f"{statistics.fmean(r['seconds'] for r in sub):.0f} |")
    return lines


def pair_table(rows: Rows, pairs: tuple[tuple[str, str], ...] = PAIRS) -> list[str]:
    lines = ["| market | comparison | Δ test Sharpe | Δ test cumulative return |", "|---|---|---|---|"]
    for market in markets_of(rows):
        for a, b in pairs:
            d = diffs(rows, market, a, b)
            if d:
                lines.append(f"| {market} | {a} − {b} | {paired(d)} | "
                             f"{paired(diffs(rows, market, a, b, 'cumulative_return'))} |")
    return lines


def targets(rows: Rows) -> list[tuple[str, str, bool]]:
    """The targets of docs/results.md as (target, measured, met)."""
    out = []

    def significant(a: str, b: str, market: str = "learnable") -> tuple[str, str, bool] | None:
        """``a`` ahead of ``b`` with t ≥ 2; beside it the filter's own reading against ``b``: a
        target the ceiling of past prices does not meet on these seeds asks for more seeds."""
        d, ceiling = diffs(rows, market, a, b), diffs(rows, market, "filter", b)
        if not d:
            return None
        beside = f" (the filter: {statistics.fmean(ceiling):+.2f}, {t_text(ceiling)})" if ceiling else ""
        return (f"{market}: {a} − {b} > 0, t ≥ 2", f"{statistics.fmean(d):+.2f}, {t_text(d)}{beside}",
                statistics.fmean(d) > 0 and t_stat(d) >= 2)

    for arm in ("ewm_40 rule", "sr_40 rule"):  # runs before the sr_40 rule was an arm have the first only
        rule = diffs(rows, "learnable", "champion", arm)
        if rule:
            out.append((f"learnable: champion − B&H ≥ {arm} − B&H − {RULE_SLACK:.2f}, paired",
                        f"champion − rule {statistics.fmean(rule):+.2f} ± {spread(rule):.2f} ({t_text(rule)})",
                        statistics.fmean(rule) >= -RULE_SLACK))
    out += [t for t in (significant("champion", "momentum"), significant("champion", "vanilla")) if t]
    most = next((arm for arm in reversed(COMPUTE[1:]) if diffs(rows, "learnable", arm, COMPUTE[0])), None)
    if most is not None:  # the most compute that ran, against 1x (the target names 16x)
        k = most.removeprefix("champion ")
        curve, ceiling = diffs(rows, "learnable", most, COMPUTE[0]), diffs(rows, "learnable", most, "filter")
        gap = statistics.fmean(ceiling) if ceiling else math.nan
        out.append((f"learnable: compute buys return: {k} − 1x > 0 with t ≥ 2, or {k} within 0.10 of the filter "
                    f"(target: 16x)", f"{k} − 1x {statistics.fmean(curve):+.2f} ± {spread(curve):.2f} "
                    f"({t_text(curve)}, {len(curve)} seed{'s' if len(curve) > 1 else ''}); {k} − filter {gap:+.2f}",
                    (statistics.fmean(curve) > 0 and t_stat(curve) >= 2) or gap >= -0.10))
    for market, what in (("martingale", "the true null"), ("null", "the leakage check")):
        arms = [a for a in ("champion", "vanilla", "momentum", "ewm_40 rule", "sr_40 rule")
                if diffs(rows, market, a, "buy-and-hold")]
        if arms:
            edges = {a: diffs(rows, market, a, "buy-and-hold") for a in arms}
            out.append((f"{market}: no arm beats B&H beyond noise, t < 2 ({what})",
                        ", ".join(f"{a} {t_text(d)}" for a, d in edges.items()),
                        not any(beats(d) for d in edges.values())))
    return out


GATE_MARGINS = (0.0, 0.1, 0.2, 0.3, 0.5)


def gate_rate(rows: Rows, margins: tuple[float, ...] = GATE_MARGINS) -> list[str]:
    """How often the pipeline's gate (champion test Sharpe > buy-and-hold's + ``registry.gate_margin``)
    would promote, per market and margin: a margin should stop null champions, not learnable ones."""
    lines = ["| market | " + " | ".join(f"margin {m:g}" for m in margins) + " |", "|---" * (len(margins) + 1) + "|"]
    for market in markets_of(rows):
        d = diffs(rows, market, "champion", "buy-and-hold")
        lines.append(f"| {market} | " + " | ".join(f"{sum(x > m for x in d)} of {len(d)}" for m in margins) + " |")
    return ["Seeds on which the gate would promote the champion (test Sharpe − buy-and-hold's > margin):", "", *lines]


def minutes_of(results: list[dict[str, Any]]) -> str:
    """The runs' total wall time; unknown when a run was recovered from its log."""
    total = sum(res["minutes"] for res in results)
    return f"{total:.0f} min" if math.isfinite(total) else "wall time not recorded for every run"


class OverlapError(ValueError):
    """Two merged runs hold the same market, seed and arm."""


def rows_of(results: list[dict[str, Any]]) -> Rows:
    """Every run's rows; one market, seed and arm in two runs (a stopped run and its rerun
    overlapping) would be counted twice by the means and silently dropped by the pairing,
    so it is an error naming both runs."""
    seen: dict[tuple[str, int, str], str] = {}
    for res in results:
        for r in res["rows"]:
            key = (r["market"], r["seed"], r["arm"])
            if key in seen:
                market, seed, arm = key
                raise OverlapError(f"{market} seed {seed} {arm} is in two runs: `{seen[key]}` and `{res['command']}`")
            seen[key] = res["command"]
    return [r for res in results for r in res["rows"]]


def report(results: list[dict[str, Any]]) -> str:
    rows = rows_of(results)
    seeds = sorted({r["seed"] for r in rows})
    lines = [f"Command: `{' && '.join(res['command'] for res in results)}` (seeds {seeds[0]}–{seeds[-1]}, "
             f"{minutes_of(results)} on this machine).",
             *[f"Recovered: `{res['command']}`: {res['recovered']}." for res in results if "recovered" in res],
             "", *arm_table(rows), "",
             "Paired per seed, mean ± std of the difference and its t statistic "
             f"({len(seeds) - 1} degrees of freedom; |t| > {critical_t(len(seeds)):.2f} is significant at 5%, "
             "two-sided):", "",
             *pair_table(rows), "", "| target | measured | met |", "|---|---|---|"]
    lines += [f"| {name} | {value} | {'met' if ok else 'not met'} |" for name, value, ok in targets(rows)]
    return "\n".join([*lines, "", *gate_rate(rows)])


def plot_seeds(rows: Rows, path: Path, arms: tuple[str, ...] = ARMS) -> None:
    """Test Sharpe of every arm and seed, per market."""
    markets = markets_of(rows)
    figure = Figure(figsize=(4.8 * len(markets), 4), layout="constrained")
    for k, market in enumerate(markets):
        axes = figure.add_subplot(1, len(markets), k + 1)
        present = [a for a in arms if any(r["market"] == market and r["arm"] == a for r in rows)]
        for j, arm in enumerate(present):
            values = [r["sharpe"] for r in rows if r["market"] == market and r["arm"] == arm]
            axes.scatter(np.full(len(values), j) + np.linspace(-0.12, 0.12, len(values)), values, color=f"C{j}", s=16)
            axes.errorbar(j + 0.28, statistics.fmean(values), yerr=spread(values),
                          fmt="s", color=f"C{j}", capsize=3)
        axes.axhline(0, color="grey", linewidth=0.6)
        axes.set_xticks(range(len(present)), present, fontsize=8, rotation=30)
        axes.set(title=f"{market}: test window", ylabel="test Sharpe (each dot a seed)")
    figure.savefig(path, dpi=100)


def plot_curve(rows: Rows, path: Path) -> None:
    """The champion's test Sharpe after each generation (mean over seeds) against env steps
    and wall time, with momentum and buy-and-hold as lines, on the learnable market."""
    champs = [r for r in rows if r["market"] == "learnable" and r["arm"] == "champion" and r["curve"]]
    if not champs:
        return
    gens = min(len(r["curve"]) for r in champs)
    curve = np.array([r["curve"][:gens] for r in champs])  # [seeds, gens, 4]
    # A run recovered from its log has no wall time: plot what was measured only.
    panels = [(1, "env steps")] + ([(2, "wall time (s), one core")] if np.isfinite(curve[:, :, 2]).all() else [])
    figure = Figure(figsize=(5 * len(panels), 4), layout="constrained")
    for k, (column, label) in enumerate(panels):
        axes = figure.add_subplot(1, len(panels), k + 1)
        x, y = curve[:, :, column].mean(0), curve[:, :, 3]
        axes.errorbar(x, y.mean(0), yerr=y.std(0, ddof=1) / math.sqrt(len(champs)) if len(champs) > 1 else None,
                      marker="o", capsize=3, label="champion (mean ± s.e. over seeds)")
        for arm, style in (("momentum", "--"), ("buy-and-hold", ":")):
            level = statistics.fmean(r["sharpe"] for r in rows if r["market"] == "learnable" and r["arm"] == arm)
            axes.axhline(level, linestyle=style, color="grey", label=arm)
        axes.set(xlabel=label, ylabel="test Sharpe", title=f"learnable market, {len(champs)} seeds")
        axes.legend(fontsize=8)
    figure.savefig(path, dpi=100)


def plot_compute(rows: Rows, path: Path) -> None:
    """The champion's test edge over buy-and-hold at 1, 4 and 16 times the default's env steps
    (mean ± s.e. over seeds), beside the rules' edges, on the learnable market."""
    arms = [a for a in COMPUTE if diffs(rows, "learnable", a, "buy-and-hold")]
    if len(arms) < 2:
        return
    common = set.intersection(*({r["seed"] for r in rows if r["market"] == "learnable" and r["arm"] == a}
                                for a in arms))
    rows = [r for r in rows if r["seed"] in common]  # every point on the same seeds
    figure = Figure(figsize=(6, 4), layout="constrained")
    axes = figure.add_subplot(1, 1, 1)
    steps = [statistics.fmean(r["env_steps"] for r in rows if r["market"] == "learnable" and r["arm"] == a)
             for a in arms]
    edge = [diffs(rows, "learnable", a, "buy-and-hold") for a in arms]
    axes.errorbar(steps, [statistics.fmean(e) for e in edge],
                  yerr=[spread(e) / math.sqrt(len(e)) for e in edge],
                  marker="o", capsize=3, label="champion (mean ± s.e. over seeds)")
    for arm, style in (("filter", "-."), ("sr_40 rule", (0, (5, 1))), ("ewm_40 rule", "--"), ("momentum", ":")):
        d = diffs(rows, "learnable", arm, "buy-and-hold")
        if d:
            axes.axhline(statistics.fmean(d), linestyle=style, color="grey", label=arm)
    axes.set_xscale("log")
    axes.set(xlabel="env steps of the run", ylabel="test Sharpe − buy-and-hold's",
             title=f"compute and return, learnable market, {len(edge[0])} seeds")
    axes.legend(fontsize=8)
    figure.savefig(path, dpi=100)


def write_report(results: list[dict[str, Any]], dev: list[dict[str, Any]] | None, out: Path | None) -> None:
    """Print the evidence (and the development runs' tables, pooled); with ``out``, write them
    below its marker with the two plots beside it."""
    text = report(results)
    dev_text = report(dev) if dev else ""
    print(text + ("\n\nDevelopment seeds:\n\n" + dev_text if dev else ""))
    if out is None:
        return
    rows = rows_of(results)
    images = out.parent / "img"
    images.mkdir(parents=True, exist_ok=True)
    plot_seeds(rows, images / "results.png")
    plot_curve(rows, images / "results-curve.png")
    plot_compute(rows, images / "results-compute.png")
    finished = [res["finished"] for res in results if "finished" in res]
    stamp = (f"measured {max(finished)}" if len(finished) == len(results)
             else f"tables written {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}")
    head = out.read_text().split(MARKER)[0] if out.exists() else "# Results\n\n"
    body = [f"## Evidence, {stamp}", "", text, "", "![test Sharpe per seed](img/results.png)", "",
            "![learning curve](img/results-curve.png)", "", "![compute and return](img/results-compute.png)"]
    if dev:
        body += ["", "## Development seeds (designs were chosen on these)", "", dev_text]
    out.write_text(f"{head}{MARKER}\n\n" + "\n".join(body) + "\n")
