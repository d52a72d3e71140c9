"""The promotion gate measured as a statistician measures a test: its size where the true
difference is known to be 0, how often it promotes on a null market, how soon on a learnable
one, and what the promoted model earns afterwards (docs/operations.md,
the gate).

    .venv/bin/python -m benchmarks.evidence.gate calibrate --seed 5000 --json docs/results/gate-calibrate.json

    .venv/bin/python -m benchmarks.evidence.gate ct --seeds 100-119 --shadow-bars 10 21 42 63 \
        --json docs/results/dev/gate-ct-dev.json
    .venv/bin/python -m benchmarks.evidence.gate ct --seeds 300-319 --shadow-bars 10 21 42 63 \
        --json docs/results/gate-ct.json
    .venv/bin/python -m benchmarks.evidence.gate ct --report docs/results/dev/gate-ct-dev.json \
        --plot docs/results/gate-ct.png
    .venv/bin/python -m benchmarks.evidence.gate pipeline --seeds 100 --markets learnable --generations 1 \
        --json docs/results/gate-pipeline-smoke.json
    .venv/bin/python -m benchmarks.evidence.gate pipeline --seeds 300-319 --json docs/results/gate-pipeline.json
    .venv/bin/python -m benchmarks.evidence.gate pipeline --report docs/results/gate-pipeline.json

Seeds 100–119 are the development seeds (the gate's design is chosen on them); 300–319
are the evidence, run once. ``--jobs`` (default: one per core) runs market-seeds side by
side, as benchmarks/evidence/results.py does. One shipped gate-year takes 16–20 s on one core; the
development run above (9 gates on 40 market-seeds, the tests shared between gates) took 52
minutes with ``--jobs 2`` on a busy 2-core machine (docs/results/dev/gate-ct-dev.json).

**calibrate**: the paired test alone on simulated pairs whose true Sharpe difference is 0
(size) or a stated edge (power), by kind of excess return and window length
(:mod:`benchmarks.gate_calibrate`). Seed 5000 is the evidence, run once; the design was
chosen on other seeds (docs/results.md).

**ct**: a year of nightly continuous-training cycles per market and seed, simulated
(:mod:`benchmarks.gate_sim`): the real gate (``against`` + ``decide_cycle``, params.yaml's
``registry`` and ``ct``) on the cycle's windows, with each night's challenger a momentum rule
drawn at random from a pool (lookback 5–120 bars, top 20–50% of the stocks, rebalanced every
5 bars, traded by ``benchmarks/rules.py`` with the env's fills and costs). A window's arm is a
slice of the rule's curve: this **ignores the entry cost** a freshly started model would pay
at each window's start. Markets: synthetic daily, 30 stocks, ``data.seed`` = the seed;
``null`` has ``data.signal: 0``, ``learnable`` is as shipped; the year is the last 252 bars.
Gates: the shipped shadow gate at each ``--shadow-bars``, its variant whose record includes the
window that chose the shadow, and today's point gate (the challenger's window Sharpe above the
champion's and buy-and-hold's, promoted every night). The year starts with no champion.

**pipeline**: the one-shot pipeline's gate over seeds: ingest → validate → features → train
→ backtest in-process, the test window's equity curves kept in the JSON, then the point gate
(agent test Sharpe > buy-and-hold's) and ``decide(against(...))`` on each curve. Markets as in
benchmarks/evidence/results.py, plus ``martingale`` (``data.signal: 0``, ``data.martingale: true``:
every price a martingale, so the agent's true Sharpe is buy-and-hold's and every promotion
there is a false one; the gate's size, docs/operations.md, the gate; docs/data.md)::

    .venv/bin/python -m benchmarks.evidence.gate pipeline --markets martingale --seeds 500-519 --jobs 2 \
        --json docs/results/gate-pipeline-martingale.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from benchmarks.common import ROOT, Market, build_features, build_market, market_params, seeds_of
from benchmarks.evidence import gate_calibrate
from benchmarks.evidence.gate_ct_report import ct_plot, ct_report
from benchmarks.evidence.gate_sim import (
    NIGHTS,
    RECORDS,
    Arms,
    Judge,
    Variant,
    draw_challengers,
    run_gate,
    summary,
)
from benchmarks.evidence.results_report import paired
from benchmarks.rules import momentum_scores, ranked_portfolio
from tasks.config import Params, load_params
from tasks.registry.decision import decide
from tasks.registry.evidence import against, binding
from trainers.common.evaluate import buy_and_hold
from trainers.common.metrics import periods_per_year, sharpe

LOOKBACKS, TOPS, EVERY = (5, 10, 20, 40, 60, 120), (0.2, 1 / 3, 0.5), 5
"""The challengers' pool: momentum rules by lookback and top share, rebalanced every 5 bars."""
CT_JSON, CT_PLOT = ROOT / "docs/results/gate-ct.json", ROOT / "docs/results/gate-ct.png"
PIPELINE_JSON = ROOT / "docs/results/gate-pipeline.json"
CALIBRATE_JSON = ROOT / "docs/results/gate-calibrate.json"


def rule_arms(market: Market, nights: int = NIGHTS) -> Arms:
    """The pool's account values over the year and the ``ct.eval_bars`` before it, and
    buy-and-hold bought afresh at any close (no entry cost, as the rules' slices)."""
    params, data, env = market.params, market.data, market.params.env
    last = data.close.shape[0] - 1
    start = last - nights - params.ct.eval_bars + 1
    if start < max(LOOKBACKS):
        raise SystemExit(f"gate.py ct: {last + 1} bars leave no room for the rules' {max(LOOKBACKS)}-bar lookback")
    values = np.stack([ranked_portfolio(data, env, (start, last), momentum_scores(data, lookback), EVERY, top)
                       for lookback in LOOKBACKS for top in TOPS])
    names = tuple(f"momentum {lookback}/{top:.0%}" for lookback in LOOKBACKS for top in TOPS)
    free, held = replace(env, cost_pct=0.0), {}

    def hold(lo: int) -> np.ndarray:
        if lo not in held:
            held[lo] = buy_and_hold(data, free, (start + lo, last))
        return held[lo]

    return Arms(values, names, hold, market.per_year, params.backtest.risk_free)


def ct_seed(job: tuple[str, int, list[str], list[int], list[str], int | None]) -> dict[str, Any]:
    """One market and seed: build the market, simulate every gate over its year."""
    market, seed, overrides, every, records, resamples = job
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=RuntimeWarning, module="arch")  # a flat pair's autocorrelation
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        m = build_market(Path(tmp), market, seed, overrides)
        arms = rule_arms(m)
    built = time.perf_counter() - started
    registry = m.params.registry
    if resamples is not None:
        registry = registry.model_copy(update={"gate_resamples": resamples})
    judge = Judge(arms, registry)
    challengers = draw_challengers(seed, NIGHTS, len(arms.names))
    variants = [Variant(None)] + [Variant(e, r) for r in records for e in every]  # type: ignore[arg-type]
    years, seconds = {}, {}
    for variant in variants:
        clock = time.perf_counter()
        years[variant.name] = summary(arms, run_gate(judge, challengers, m.params.ct.eval_bars, variant), NIGHTS)
        seconds[variant.name] = time.perf_counter() - clock
    first = arms.bars - NIGHTS + 1
    pool = {name: arms.edge(i, first - 1) for i, name in enumerate(arms.names)}
    total = time.perf_counter() - started
    said = ", ".join(f"{name} {len(y['promotions'])}" for name, y in years.items())
    print(f"{market} {seed}: {total:.0f} s ({len(judge.cache):,} tests); promotions: {said}", flush=True)
    return {"market": market, "seed": seed, "years": years, "seconds": seconds, "build_seconds": built,
            "total_seconds": total, "tests": len(judge.cache), "pool": list(arms.names), "pool_edge": pool}


def pipeline_seed(job: tuple[str, int, list[str]]) -> dict[str, Any]:
    """One market and seed through the real stages, in-process: the test window's curves."""
    from tasks.model.backtest import backtest
    from tasks.model.train import train

    market, seed, overrides = job
    torch.set_num_threads(1)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        params = market_params(Path(tmp), market, seed, overrides)
        build_features(params)
        train(params)
        tested = backtest(params)
    curve = tested.curve
    row = {"market": market, "seed": seed, "dates": [str(d.date()) for d in curve.index],
           "agent": curve["agent"].tolist(), "buy_and_hold": curve["buy_and_hold"].tolist(),
           "per_year": periods_per_year(params.data.freq), "risk_free": params.backtest.risk_free,
           "seconds": time.perf_counter() - started}
    print(f"{market} {seed}: {row['seconds']:.0f} s, test Sharpe agent {tested.metrics['agent']['sharpe']:.2f}, "
          f"buy-and-hold {tested.buy_and_hold['sharpe']:.2f}", flush=True)
    return row


def pipeline_gates(row: dict[str, Any], params: Params) -> dict[str, Any]:
    """Today's point gate and the shipped gate on one test-window curve."""
    curve = pd.DataFrame({"agent": row["agent"], "buy_and_hold": row["buy_and_hold"]},
                         index=pd.DatetimeIndex(row["dates"]))
    agent, hold = (sharpe(curve[c].to_numpy(), row["per_year"], row["risk_free"]) for c in curve.columns)
    decision = decide(against(curve, "agent", params.registry, row["per_year"], row["risk_free"]))
    return {"diff": agent - hold, "point": agent > hold, "action": decision.action,
            "p": binding(decision.evidence).p_value, "line": decision.line}


def pipeline_report(result: dict[str, Any], params: Params) -> str:
    """Per market: seeds, promotions by each gate, shadows, ΔSharpe over seeds; then each seed."""
    gated = [(r, pipeline_gates(r, params)) for r in result["rows"]]
    lines = [f"Command: `{result['command']}`", "", f"Gate: gate_alpha {params.registry.gate_alpha}, gate_margin "
             f"{params.registry.gate_margin}, gate_resamples {params.registry.gate_resamples} (params.yaml now).", "",
             "| market | seeds | point gate promotes | new gate promotes | shadows | refuses "
             "| agent − buy-and-hold test Sharpe (t over seeds) |", "|---" * 7 + "|"]
    per_seed = ["| market | seed | ΔSharpe | p | point gate | new gate |", "|---" * 6 + "|"]
    for market in dict.fromkeys(r["market"] for r in result["rows"]):
        mine = [g for r, g in gated if r["market"] == market]
        count = {a: sum(g["action"] == a for g in mine) for a in ("promote", "shadow", "refuse")}
        lines.append(f"| {market} | {len(mine)} | {sum(g['point'] for g in mine)} | {count['promote']} "
                     f"| {count['shadow']} | {count['refuse']} | {paired([g['diff'] for g in mine])} |")
        per_seed += [f"| {market} | {r['seed']} | {g['diff']:+.2f} | {g['p']:.3f} | "
                     f"{'promote' if g['point'] else 'refuse'} | {g['action']} |"
                     for r, g in gated if r["market"] == market]
    return "\n".join([*lines, "", *per_seed])


def run_jobs(work: Any, jobs: list[Any], processes: int) -> list[Any]:
    """``work`` over ``jobs``, side by side in spawned processes as benchmarks/evidence/results.py runs
    seeds (in this process when there is one process or one job)."""
    if processes <= 1 or len(jobs) <= 1:
        return [work(job) for job in jobs]
    with multiprocessing.get_context("spawn").Pool(min(processes, len(jobs))) as pool:
        return list(pool.imap(work, jobs))


def write(result: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {path}")


def calibrate(args: argparse.Namespace, line: str, params: Params) -> None:
    """Run (or, with ``--report``, reprint) the size and power tables of the shipped test."""
    if args.report:
        print(gate_calibrate.report(json.loads(args.report.read_text())))
        return
    if args.pairs < 1 or args.power_pairs < 1:
        raise SystemExit("gate.py calibrate: --pairs and --power-pairs must be ≥ 1")
    started = time.perf_counter()
    cells = run_jobs(gate_calibrate.cell, gate_calibrate.jobs(args.pairs, args.power_pairs, args.edges, args.seed,
                                                              params.registry), args.jobs)
    result = {"command": line, "minutes": (time.perf_counter() - started) / 60, "cells": cells,
              "registry": params.registry.model_dump(mode="json"),
              "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    write(result, args.json)
    print(gate_calibrate.report(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    ct = sub.add_parser("ct", help="a simulated year of nightly CT gates per market and seed")
    pipe = sub.add_parser("pipeline", help="the pipeline's gate on trained agents over seeds")
    cal = sub.add_parser("calibrate", help="the test's size and power on simulated pairs")
    cal.add_argument("--seed", type=int, default=5000, help="5000: the evidence, run once")
    cal.add_argument("--pairs", type=int, default=2000, help="null pairs per cell")
    cal.add_argument("--power-pairs", type=int, default=500, help="pairs per power cell")
    cal.add_argument("--edges", type=float, nargs="*", default=[1.0], help="true annual Sharpe edges for power")
    cal.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="cells run side by side")
    cal.add_argument("--json", type=Path, default=CALIBRATE_JSON)
    cal.add_argument("--report", type=Path, help="print the tables of an earlier --json run (nothing is run)")
    cal.add_argument("--set", "-s", dest="overrides", action="append", default=[],
                     help="override a params.yaml registry key (the test measured is params.yaml's)")
    for p, markets, choices in ((ct, ["learnable", "null"], ("learnable", "null")),
                                (pipe, ["learnable", "null", "arch-demo"],
                                 ("learnable", "null", "martingale", "arch-demo"))):
        p.add_argument("--seeds", type=seeds_of, default=seeds_of("100-119"),
                       help="100-119 to develop, 300-319 for the evidence")
        p.add_argument("--markets", nargs="+", default=markets, choices=choices)
        p.add_argument("--set", "-s", dest="overrides", action="append", default=[],
                       help="override a params.yaml key for every run")
        p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="market-seeds run side by side")
        p.add_argument("--report", type=Path, help="print the tables of an earlier --json run (nothing is run)")
    ct.add_argument("--json", type=Path, default=CT_JSON)
    ct.add_argument("--plot", type=Path, help=f"the figure (default when running: {CT_PLOT.relative_to(ROOT)}; "
                    "with --report: drawn again from the JSON)")
    ct.add_argument("--shadow-bars", type=int, nargs="+", help="ct.shadow_bars to compare (default params.yaml's)")
    ct.add_argument("--records", nargs="+", default=list(RECORDS), choices=RECORDS,
                    help="shipped: the shadow's record starts after its window; included: at its window's start")
    ct.add_argument("--resamples", type=int, help="FEWER BOOTSTRAP RESAMPLES than params.yaml's, for a quick look "
                    "only (labelled in the output)")
    pipe.add_argument("--json", type=Path, default=PIPELINE_JSON)
    pipe.add_argument("--generations", type=int, help="evolution.generations (default params.yaml's)")
    args = parser.parse_args()
    line = " ".join([".venv/bin/python -m benchmarks.evidence.gate", *sys.argv[1:]])
    params = load_params(ROOT / "params.yaml", args.overrides)
    if args.report and not args.report.is_file():
        raise SystemExit(f"gate.py {args.command}: {args.report}: no such file (a --json of an earlier run)")
    if args.command == "calibrate":
        calibrate(args, line, params)
        return
    if args.command == "pipeline":
        if args.report:
            print(pipeline_report(json.loads(args.report.read_text()), params))
            return
        extra = [f"evolution.generations={args.generations}"] if args.generations else []
        started = time.perf_counter()
        rows = run_jobs(pipeline_seed, [(m, s, [*args.overrides, *extra]) for m in args.markets for s in args.seeds],
                        args.jobs)
        result = {"command": line, "minutes": (time.perf_counter() - started) / 60, "rows": rows,
                  "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
        write(result, args.json)
        print(pipeline_report(result, params))
        return
    if args.report:
        result = json.loads(args.report.read_text())
        if args.plot:
            ct_plot(result, args.plot)
    else:
        every = args.shadow_bars or [params.ct.shadow_bars]
        if min(every) < 1 or (args.resamples is not None and args.resamples < 99):
            raise SystemExit("gate.py ct: --shadow-bars must be ≥ 1 and --resamples ≥ 99")
        started = time.perf_counter()
        jobs = [(m, s, args.overrides, every, args.records, args.resamples) for m in args.markets for s in args.seeds]
        rows = run_jobs(ct_seed, jobs, args.jobs)
        registry = params.registry
        result = {"command": line, "minutes": (time.perf_counter() - started) / 60, "rows": rows,
                  "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                  "config": {"eval_bars": params.ct.eval_bars, "gate_alpha": registry.gate_alpha,
                             "gate_margin": registry.gate_margin, "gate_seed": registry.gate_seed,
                             "gate_resamples": args.resamples or registry.gate_resamples,
                             "resamples_shipped": args.resamples in (None, registry.gate_resamples),
                             "pool": len(LOOKBACKS) * len(TOPS), "nights": NIGHTS}}
        write(result, args.json)
        ct_plot(result, args.plot or CT_PLOT)
    print(ct_report(result))


if __name__ == "__main__":
    main()
