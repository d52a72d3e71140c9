"""The live watch where the truth is known: how often it fires on a champion that keeps its
edge, and how late it finds a planted decay (``tasks/registry/decay.py``; docs/results.md, the watch).

A champion's paper record is simulated as buy-and-hold's per-bar return plus an active return:
Gaussian, AR(1) with persistence ``phi``, whose mean is the champion's edge, an annualised
information ratio ``ir`` (over buy-and-hold). Its promise is read, as the gate reads it, from a
window of ``gate`` bars of the same process before the promotion, so the promise carries the
estimation error a real one does. Each record runs ``years`` after the promotion, and every bar
is a look. Scenarios:

- **holds**: the edge never changes. Every alarm is false: the rate per year of records watched
  (a record stops at its first alarm, as a champion would be replaced), with its exact Poisson
  95% interval, for the decay test (a retrain) and the severe one (a rollback);
- **flip** / **zero**: the edge turns to ``−ir`` / to 0 at bar ``change`` of the record. The
  delay is the bars from the change to the alarm (median and 90th percentile; a record that
  never alarms counts as never), and the money lost is the active return given up over that
  delay against a champion stopped at the change (the safe policy holds the market).

Beside the watch, two other monitors of the same record, each tested against the watch on
the same records:

- a **naive** one that repeats a fixed-α one-sided t-test of the record's mean against the
  decay floor at every bar: the looks it does not count are why the watch counts them;
- a **mixture** one: Howard, Ramdas, McAuliffe & Sekhon's (2021) one-sided normal-mixture
  confidence sequence for the record's mean active return (the boundary ``confseq`` computes;
  the package itself publishes no wheel and its build needs Boost, so it cannot be pinned
  here), which alarms when the sequence lies wholly below buy-and-hold: always valid over
  every look, at level ``--mixture-alpha`` over the record's whole life. It tests the mean
  since the promotion, so a change after a good year must first undo that year; a CUSUM
  forgets it (Page 1954), which is why the watch is a CUSUM (docs/results.md, the watch).

    .venv/bin/python -m benchmarks.evidence.decay --seed 70 --json docs/results/decay.json     # fresh, run once
    .venv/bin/python -m benchmarks.evidence.decay --seed 170 --json docs/results/dev/decay-dev.json  # development
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass

import numpy as np
from scipy.stats import chi2, norm

from tasks.config_ops import WatchParams
from tasks.registry.decay import Promise, watch


@dataclass(frozen=True)
class Config:
    name: str
    per_year: int
    gate: int
    """Bars of the gate window the promise is read from."""
    records: int
    years: float
    """Years each record is watched for after the promotion."""
    change: int
    """The record bar at which a planted decay begins."""
    session: int = 1
    """Bars per trading session, to state delays in sessions."""


CONFIGS = {"daily": Config("daily", 252, 252, 200, 5.0, 252),
           "minute": Config("minute", 98_280, 98_280, 20, 5.0, 19_656, 390)}
"""Daily: a year's gate window, 200 records of 5 years (1,000 record-years). Minute: the paper's
year of minute bars, 20 records of 5 years (100 record-years), the change after 50 sessions."""
TARGET_SESSIONS = {"daily": 63, "minute": 5}
"""The delay targets for a sign flip, in sessions: the mixture monitor's boundary is tightest there."""
BENCH_SD, ACTIVE_SD = 0.01, 0.004
"""Per-bar standard deviations of buy-and-hold's daily return and of the active return (scaled
by √(252/per_year) for other bar lengths)."""


def active_returns(rng: np.random.Generator, bars: int, mean: np.ndarray | float, sd: float, phi: float) -> np.ndarray:
    """An AR(1) series of ``bars`` with stationary standard deviation ``sd`` around ``mean``."""
    shocks = rng.normal(0.0, sd * math.sqrt(1.0 - phi * phi), bars)
    if phi:
        from scipy.signal import lfilter

        shocks = lfilter([1.0], [1.0, -phi], shocks)
    return shocks + mean


def record(rng: np.random.Generator, c: Config, ir: float, phi: float, after: float | None) -> tuple:
    """One champion: its promise (from the gate window) and its live record's returns, the edge
    becoming ``after`` (an information ratio) at ``c.change`` when given."""
    scale = math.sqrt(252 / c.per_year)
    sd = ACTIVE_SD * scale
    edge = ir * sd / math.sqrt(c.per_year)  # per-bar mean: ir = mean / sd · √per_year
    bars = int(c.years * c.per_year)
    gate_bench = rng.normal(0.0003 * scale**2, BENCH_SD * scale, c.gate)
    promise = Promise.of(gate_bench + active_returns(rng, c.gate, edge, sd, phi), gate_bench)
    mean = np.full(bars, edge)
    if after is not None:
        mean[c.change:] = after * sd / math.sqrt(c.per_year)
    bench = rng.normal(0.0003 * scale**2, BENCH_SD * scale, bars)
    return promise, bench + active_returns(rng, bars, mean, sd, phi), bench


def naive_alarm(active: np.ndarray, floor: float, alpha: float = 0.05) -> int | None:
    """The first bar (of at least 10) at which a one-sided t-test of the mean so far against
    ``floor`` rejects at ``alpha``: every look at its full α."""
    n = np.arange(1, active.size + 1)
    mean = np.cumsum(active) / n
    var = np.maximum(np.cumsum(active * active) / n - mean * mean, 1e-300) * n / np.maximum(n - 1, 1)
    t = (mean - floor) / np.sqrt(var / n)
    hits = np.flatnonzero((t < norm.ppf(alpha)) & (n >= 10))
    return int(hits[0]) if hits.size else None


def mixture_alarm(active: np.ndarray, spread: float, alpha: float, v_opt: float) -> int | None:
    """The first bar (of at least 10) at which the one-sided normal-mixture boundary is crossed
    by the record's shortfall below buy-and-hold, ``S_t = Σ −a_i / spread``: ``S_t ≥
    √(2 (t + ρ) log(√((t + ρ)/ρ) / (2α) + 1))`` (Howard et al. 2021, the one-sided normal
    mixture, with intrinsic time ``t`` in bars of unit variance), ``ρ`` chosen to make the
    boundary tightest at ``v_opt`` bars."""
    n = np.arange(1, active.size + 1, dtype=np.float64)
    shortfall = np.cumsum(-active / spread)
    log_term = math.log(1.0 / (2.0 * alpha))
    rho = v_opt / (2.0 * log_term + math.log(1.0 + 2.0 * log_term))
    bound = np.sqrt(2.0 * (n + rho) * np.log(np.sqrt((n + rho) / rho) / (2.0 * alpha) + 1.0))
    hits = np.flatnonzero((shortfall >= bound) & (n >= 10))
    return int(hits[0]) if hits.size else None


def rate(alarms: int, years: float) -> dict[str, float]:
    """Alarms per record-year with the exact Poisson 95% interval."""
    lo = chi2.ppf(0.025, 2 * alarms) / 2 / years if alarms else 0.0
    return {"alarms": alarms, "years": years, "per_year": alarms / years, "low": lo,
            "high": chi2.ppf(0.975, 2 * alarms + 2) / 2 / years}


def scenario(c: Config, kind: str, ir: float, phi: float, tolerance: float, arl: float, seed: int,
             mixture_alpha: float = 0.05) -> dict:
    """Every record of one scenario: the watch's alarms and the naive and mixture monitors'."""
    rng = np.random.default_rng(seed)
    after = {"holds": None, "flip": -ir, "zero": 0.0}[kind]
    found: dict[str, list[int | None]] = {"decay": [], "severe": [], "naive": [], "mixture": []}
    v_opt = c.change + TARGET_SESSIONS[c.name] * c.session  # tightest where a flip should be called
    lost: dict[str, list[float]] = {"decay": [], "severe": []}
    for _ in range(c.records):
        promise, model, bench = record(rng, c, ir, phi, after)
        w = watch(model, bench, promise, tolerance=tolerance, years=arl, per_year=c.per_year)
        if w.fault is not None:
            raise RuntimeError(f"simulated record failed closed: {w.fault}")
        found["decay"].append(w.decay.alarm)
        found["severe"].append(w.severe.alarm)
        found["naive"].append(naive_alarm(model - bench, w.decay.reference))
        found["mixture"].append(mixture_alarm(model - bench, promise.spread, mixture_alpha, v_opt))
        for test in lost:
            alarm = getattr(w, test).alarm
            if after is not None and alarm is not None and alarm >= c.change:
                lost[test].append(-float((model - bench)[c.change:alarm + 1].sum()))
    bars = int(c.years * c.per_year)
    out: dict = {"config": c.name, "scenario": kind, "ir": ir, "phi": phi, "tolerance": tolerance, "arl_years": arl,
                 "mixture_alpha": mixture_alpha, "records": c.records}
    for test, alarms in found.items():
        if after is None:
            exposure = sum((a + 1 if a is not None else bars) for a in alarms) / c.per_year
            out[test] = rate(sum(a is not None for a in alarms), exposure)
            continue
        early = sum(a is not None and a < c.change for a in alarms)
        delays = np.array([a - c.change if a is not None else np.inf for a in alarms if a is None or a >= c.change])
        def q(p: float) -> float:
            return float(np.quantile(delays, p, method="inverted_cdf")) if delays.size else math.nan

        out[test] = {"false_before_change": early, "median": q(0.5), "p90": q(0.9),
                     "missed": int(np.isinf(delays).sum())}
    for test, given_up in lost.items():
        if given_up:
            out[test]["median_lost"] = float(np.median(given_up))
    return out


def table(rows: list[dict]) -> str:
    lines = ["| config | scenario | test | false alarms / year [95%] or delay in bars: median, p90 (sessions) "
             "| median active return lost |", "|---|---|---|---|---|"]
    for r in rows:
        c = CONFIGS[r["config"]]
        for test in ("decay", "severe", "naive", "mixture"):
            if test not in r:  # a row written before the mixture monitor was measured
                continue
            x = r[test]
            if r["scenario"] == "holds":
                cell = f"{x['per_year']:.3f} [{x['low']:.3f}, {x['high']:.3f}] ({x['alarms']} in {x['years']:.0f} y)"
            else:
                sessions = f"{x['median'] / c.session:.1f}, {x['p90'] / c.session:.1f}"
                cell = (f"{x['median']:.0f}, {x['p90']:.0f} ({sessions}); "
                        f"{x['false_before_change']} before the change, {x['missed']} never")
            lost = f"{100 * x['median_lost']:.2f}%" if "median_lost" in x else ""
            lines.append(f"| {r['config']} | {r['scenario']} | {test} | {cell} | {lost} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--scenarios", nargs="+", default=["holds", "flip", "zero"])
    parser.add_argument("--ir", type=float, default=1.5, help="the champion's true annualised information ratio")
    parser.add_argument("--phi", type=float, default=0.1, help="AR(1) persistence of the active return")
    shipped = WatchParams()
    parser.add_argument("--tolerance", type=float, default=shipped.tolerance,
                        help="information ratio the promise may fall short by (default: params' watch.tolerance)")
    parser.add_argument("--arl", type=float, default=shipped.years,
                        help="years between false alarms at each reference (default: params' watch.years)")
    parser.add_argument("--mixture-alpha", type=float, default=0.05,
                        help="level of the mixture monitor's confidence sequence over a record's life")
    parser.add_argument("--seed", type=int, default=70)
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    started, rows = time.perf_counter(), []
    for name in args.configs:
        for k, kind in enumerate(args.scenarios):
            rows.append(scenario(CONFIGS[name], kind, args.ir, args.phi, args.tolerance, args.arl, args.seed + k,
                                 args.mixture_alpha))
            print(f"{name} {kind} done ({time.perf_counter() - started:.0f} s)", flush=True)
    print(table(rows))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"command": " ".join([".venv/bin/python -m benchmarks.evidence.decay", *sys.argv[1:]]),
                       "seconds": time.perf_counter() - started, "rows": rows}, out, indent=1)


if __name__ == "__main__":
    main()
