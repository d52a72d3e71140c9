"""The report of ``benchmarks/evidence/ablations.py``'s rows: each arm's train, validation and test
edge over buy-and-hold, its test edge paired by seed with its reference, the ladder step by step,
the selection bound and the blends against the vanilla agent, the registered policy's shrinkage
and luck, and their plot (docs/results.md, where the edge is lost)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.evidence.ablations import (
    ARMS,
    AVERAGED,
    BLENDS,
    BOUND,
    LADDER,
    PICKED,
    PRIORS,
    REFERENCE,
    START,
    WINDOWS,
)
from benchmarks.evidence.results_report import paired


def report(rows: list[dict[str, Any]]) -> str:
    """The arms' edges per window, and each arm's test edge paired with the shipped arm's by seed."""
    by = {(r["arm"], r["seed"]): r for r in rows}
    seeds = sorted({r["seed"] for r in rows})
    arms = list(dict.fromkeys(r["arm"] for r in rows))
    lines = [f"Seeds {seeds[0]}–{seeds[-1]} (n = {len(seeds)}); Sharpe less buy-and-hold's on the same "
             "window, mean ± sd over seeds; the last column is paired by seed with the arm named there.", "",
             "| arm | train | validation | test | test − reference (t) |", "|---|---|---|---|---|"]

    def cell(values: list[float]) -> str:
        return f"{np.mean(values):+.2f} ± {np.std(values, ddof=1):.2f}" if len(values) > 1 else "-"

    for arm in arms:
        own = [by[(arm, s)] for s in seeds if (arm, s) in by]
        ref = ARMS[arm].reference if arm in ARMS else START if arm == PICKED or arm in BLENDS else REFERENCE
        if not any((ref, s) in by for s in seeds):  # a run without the shipped arm: its rows came with this one
            ref = AVERAGED
        if not any((ref, s) in by for s in seeds):  # the rules alone (--rules): each against the first, ewm_40's
            ref = arms[0]
        vs = [by[(arm, s)]["test"] - by[(ref, s)]["test"] for s in seeds if (arm, s) in by and (ref, s) in by]
        lines.append(f"| {arm} | " + " | ".join(cell([r[w] for r in own]) for w in WINDOWS)
                     + (" | |" if arm == ref or not vs else f" | = {ref} on every seed |" if not any(vs)
                        else f" | − {ref}: {paired(vs)} |"))
    chosen = [by[(PICKED, s)]["picked"] for s in seeds if (PICKED, s) in by]
    if chosen:
        lines += ["", f"{PICKED[0].upper()}{PICKED[1:]}: " + ", ".join(
            f"{name} on {chosen.count(name)} of {len(chosen)} seeds" for name in PRIORS if name in chosen) + "."]
    steps = [(a, b, [by[(b, s)]["test"] - by[(a, s)]["test"] for s in seeds if (a, s) in by and (b, s) in by])
             for a, b in zip(LADDER, LADDER[1:])]
    if any(vs for _, _, vs in steps):
        lines += ["", "Each step of the ladder against the one before it, test edge paired by seed:", ""]
        lines += [f"- {b} − {a}: {paired(vs)}" for a, b, vs in steps]

    def over_vanilla(arm: str) -> list[float]:
        return [by[(arm, s)]["test"] - by[("vanilla", s)]["test"]
                for s in seeds if (arm, s) in by and ("vanilla", s) in by]

    if over := over_vanilla(BOUND):
        spread = [by[(BOUND, s)]["spread"] for s in seeds if (BOUND, s) in by]
        lines += ["", f"The final agent best on test (a bound no selection rule reaches) − vanilla: {paired(over)}; "
                      f"the final agents' test edges span {cell(spread)} (best − worst)."]
    if blends := [f"{name} {paired(vs)}" for name in BLENDS if (vs := over_vanilla(name))]:
        lines += ["", "Each blend − vanilla: " + "; ".join(blends) + "."]
    best = [r for r in rows if "luck" in r]  # the registered policy's row of each run of the shipped arm
    if best:
        shrink = [r["val"] - r["test"] for r in best]
        finals = [bool(r["final"]) for r in best if "final" in r]
        lines += ["", (f"The shipped run registered the final population's best on {sum(finals)} of {len(finals)} "
                       "seeds. " if finals else f"The run registered {best[0]['arm'].removeprefix('selection: ')}. ")
                  + f"The registered policy's validation edge shrinks on test by {cell(shrink)}. Its run scored "
                  f"{np.mean([r['trials'] for r in best]):.0f} snapshots on validation; with their spread, the best of "
                  f"that many would lead by {cell([r['luck'] for r in best])} in Sharpe with no edge at all (SR₀, the "
                  f"expected shrinkage of a lucky best), and its deflated Sharpe ratio (the chance that its Sharpe "
                  f"beats that luck) is {cell([r['dsr'] for r in best])}."]
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Each arm's mean train, validation and test edge over buy-and-hold (± s.e. over seeds):
    the gap between in sample and out of sample, arm by arm."""
    from matplotlib.figure import Figure

    arms = list(dict.fromkeys(r["arm"] for r in rows))
    figure = Figure(figsize=(11, 0.32 * len(arms) + 1.2), layout="constrained")
    axes = figure.add_subplot(1, 1, 1)
    y = np.arange(len(arms))
    for k, window in enumerate(WINDOWS):
        values = [[r[window] for r in rows if r["arm"] == arm] for arm in arms]
        means = [np.mean(v) for v in values]
        errors = [np.std(v, ddof=1) / np.sqrt(len(v)) if len(v) > 1 else 0.0 for v in values]
        axes.barh(y + (k - 1) * 0.27, means, 0.27, xerr=errors, label=window, color=f"C{k}", capsize=2)
    axes.axvline(0, color="grey", linewidth=0.6)
    axes.set_yticks(y, arms, fontsize=8)
    axes.invert_yaxis()
    axes.set(xlabel="Sharpe less buy-and-hold's (development seeds, mean ± s.e.)")
    axes.legend(fontsize=8, loc="best")
    figure.savefig(path, dpi=100)
