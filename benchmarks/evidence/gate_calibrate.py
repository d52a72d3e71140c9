"""The gate's test measured where the truth is known: its size on pairs whose true Sharpe
difference is exactly 0, and its power against a real edge (``benchmarks/evidence/gate.py calibrate``;
docs/operations.md, the gate; docs/results.md, the gate).

Each pair is a benchmark (buy-and-hold: i.i.d. Gaussian daily returns, mean 0.04%, sd 1%, an
annual Sharpe of 0.63) and a model = benchmark + an excess return series of zero mean and
tracking error ``te``, plus the constant that gives the model exactly the benchmark's
Sharpe (the excess adds variance, so the model needs ``μ (σ_model / σ − 1)`` more mean).
The excess series differ by cell: independent Gaussian; AR(1) with φ 0.2, 0.5 and 0.9;
GARCH(1,1) with Student-t(4) shocks; Gaussian with jumps; and a near-twin of buy-and-hold
(tracking error 0.05% a day, AR(1) φ 0.2), the regime of a warm-started challenger. Power
cells add a constant edge worth ``edge`` of annual Sharpe. Every pair runs through the real
:func:`tasks.registry.evidence.paired_test` with params.yaml's ``registry`` (α, margin,
resamples, seed), except that the margin is 0: the size is measured at the boundary of H0.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from scipy.signal import lfilter
from scipy.stats import binomtest

from tasks.config import RegistryParams
from tasks.data.synthetic_daily import _garch_shocks
from tasks.registry.evidence import paired_test

MU, SD, TE, TWIN_TE, BURN = 0.0004, 0.01, 0.003, 0.0005, 200
KINDS = ("independent", "AR 0.2", "AR 0.5", "AR 0.9", "GARCH-t", "jumps", "near-twin")
BARS = (21, 63, 250)


def _ar(phi: float) -> Callable[[np.random.Generator, int], np.ndarray]:
    def draw(rng: np.random.Generator, n: int) -> np.ndarray:
        return lfilter([math.sqrt(1 - phi * phi)], [1.0, -phi], rng.standard_normal(n))
    return draw


def _garch_t(rng: np.random.Generator, n: int) -> np.ndarray:
    """Unit-variance GARCH(1,1) with Student-t(4) shocks, as the embedded market draws its
    idiosyncratic shocks (α 0.08, β 0.9)."""
    return _garch_shocks(rng, n, 1, np.ones(1), dof=4.0)[0][:, 0]


def _jumps(rng: np.random.Generator, n: int) -> np.ndarray:
    """Unit variance: half Gaussian, half jumps of ±5 sd arriving on 2% of the bars."""
    jumps = (rng.random(n) < 0.02) * rng.choice([-1.0, 1.0], n) * math.sqrt(0.5 / 0.02)
    return rng.standard_normal(n) * math.sqrt(0.5) + jumps


EXCESS: dict[str, Callable[[np.random.Generator, int], np.ndarray]] = {
    "independent": lambda rng, n: rng.standard_normal(n), "AR 0.2": _ar(0.2), "AR 0.5": _ar(0.5),
    "AR 0.9": _ar(0.9), "GARCH-t": _garch_t, "jumps": _jumps, "near-twin": _ar(0.2)}
"""Unit-variance, zero-mean excess series by cell (a burn-in of :data:`BURN` bars is dropped)."""


def null_pair(kind: str, bars: int, rng: np.random.Generator, edge: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """``(model, benchmark)`` per-bar returns whose true annual Sharpe difference is ``edge``."""
    te = TWIN_TE if kind == "near-twin" else TE
    excess = EXCESS[kind](rng, bars + BURN)[BURN:] * te
    bench = MU + SD * rng.standard_normal(bars)
    sd_model = math.sqrt(SD * SD + te * te)
    return bench + excess + MU * (sd_model / SD - 1) + edge * sd_model / math.sqrt(252), bench


def cell(job: tuple[str, int, float, int, int, dict[str, Any]]) -> dict[str, Any]:
    """One cell: ``pairs`` pairs through the shipped test; the share that passes, with its
    exact (Clopper–Pearson) 95% interval."""
    kind, bars, edge, pairs, seed, registry = job
    reg = RegistryParams(**registry)
    rng = np.random.default_rng([seed, KINDS.index(kind), bars, int(round(edge * 100))])
    started = time.perf_counter()
    passed = sum(paired_test(*null_pair(kind, bars, rng, edge), "buy_and_hold", per_year=252.0, margin=0.0,
                             alpha=reg.gate_alpha, resamples=reg.gate_resamples, seed=reg.gate_seed).passed
                 for _ in range(pairs))
    low, high = binomtest(passed, pairs).proportion_ci(0.95, method="exact")
    print(f"{kind:>11} {bars:>3} bars, edge {edge:+.1f}: {passed / pairs:6.1%} [{low:.1%}, {high:.1%}] "
          f"({time.perf_counter() - started:.0f} s)", flush=True)
    return {"kind": kind, "bars": bars, "edge": edge, "pairs": pairs, "passed": passed, "share": passed / pairs,
            "low": low, "high": high}


def jobs(pairs: int, power_pairs: int, edges: list[float], seed: int, registry: RegistryParams) -> list[tuple]:
    shipped = registry.model_dump(mode="json")
    null = [(k, b, 0.0, pairs, seed, shipped) for k in KINDS for b in BARS]
    power = [(k, b, e, power_pairs, seed, shipped) for e in edges for k in ("independent", "AR 0.5", "near-twin")
             for b in BARS]
    return null + power


def report(result: dict[str, Any]) -> str:
    """Size by cell and bars (with intervals), then power; the target is at most α + 1 point
    wherever φ ≤ 0.5."""
    rows = result["cells"]
    alpha = result["registry"]["gate_alpha"]
    target = alpha + 0.01

    def share(row: dict[str, Any], bold: bool) -> str:
        text = f"{row['share']:.1%} [{row['low']:.1%}, {row['high']:.1%}]"
        return f"**{text}**" if bold else text

    lines = [f"Command: `{result['command']}` ({result['minutes']:.0f} min)", "",
             f"Size at α {alpha:g} (true difference exactly 0, {rows[0]['pairs']:,} pairs a cell, "
             f"{result['registry']['gate_resamples']:,} resamples a test; target ≤ {target:.0%} where φ ≤ 0.5; "
             "bold: above it):", "", "| excess return | " + " | ".join(f"{b} bars" for b in BARS) + " |",
             "|---" * (len(BARS) + 1) + "|"]
    for kind in KINDS:
        mine = {r["bars"]: r for r in rows if r["kind"] == kind and r["edge"] == 0}
        lines.append(f"| {kind} | " + " | ".join(
            share(mine[b], mine[b]["share"] > target and kind != "AR 0.9") for b in BARS) + " |")
    powered = [r for r in rows if r["edge"] != 0]
    if powered:
        lines += ["", f"Power (share promoted, {powered[0]['pairs']:,} pairs a cell) against a true edge:", "",
                  "| true ΔSharpe | excess return | " + " | ".join(f"{b} bars" for b in BARS) + " |",
                  "|---" * (len(BARS) + 2) + "|"]
        for edge in dict.fromkeys(r["edge"] for r in powered):
            for kind in dict.fromkeys(r["kind"] for r in powered):
                mine = {r["bars"]: r for r in powered if r["kind"] == kind and r["edge"] == edge}
                lines.append(f"| {edge:+.1f} | {kind} | " + " | ".join(share(mine[b], False) for b in BARS) + " |")
    return "\n".join(lines)
