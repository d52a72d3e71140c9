"""The CT gate's challengers as they really are: warm-started near-twins of the champion.

A CT cycle trains its challenger from the champion's weights for ``ct.generations``
(docs/operations.md, the CT cycle), so challenger and champion hold almost the same
portfolio: their per-bar returns differ by a small tracking error, the regime where a small
steady difference becomes significant (docs/operations.md, the gate: the test's size depends on the
difference's autocorrelation). ``benchmarks/evidence/gate.py ct`` drew its challengers from momentum
rules and charged no entry cost at a window's start; this module measures the real ones and
simulates null CT years from the measurement (:mod:`benchmarks.gate_twins_sim`).

**measure**: per market and seed (synthetic daily, 30 stocks, params.yaml; ``null`` has
``data.signal: 0``) the pipeline's stages in-process give the champion (``train`` on the
train split, selection on validation). Each night is a cutoff on that market: the feature set
truncated to the bars up to the night, which is what the cycle holds after appending the bars
(its appended rows equal a full recompute, and the train split keeps its statistics). On it
the cycle's own functions run: :func:`~tasks.model.walkforward.walk` (the windows, and
the challenger's plan, warm-started from the champion), :func:`~tasks.model.train.train`
and :func:`~tasks.model.backtest.backtest` of challenger, champion and buy-and-hold on the
``ct.eval_bars`` window. Nights lie after the champion's
cutoff by at least a window, so the champion has seen none of it. Per pair of arms it keeps
the tracking error (annualised sd of the per-bar return difference), the difference's lag-1
autocorrelation and mean (annualised: the edge), all over the window's bars after the first,
and each arm's entry cost: its first bar's value with costs against the same policy run with
``env.cost_pct`` 0 (first-bar turnover × cost).

    .venv/bin/python -m benchmarks.evidence.gate_twins measure --seeds 600-605 --nights 10 --spacing 15 --jobs 2
    .venv/bin/python -m benchmarks.evidence.gate_twins report docs/results/gate-twins.json
    .venv/bin/python -m benchmarks.evidence.gate_twins simulate --config daily --years 700-799 --jobs 2
    .venv/bin/python -m benchmarks.evidence.gate_twins simulate --config minute --years 700-799 --jobs 2

The measurement above (docs/results/gate-twins.json: 60 challengers, 6 market-seeds) took
41 minutes with ``--jobs 2`` on a 2-core machine at load 5–8: the champion 3–15 minutes
(32 generations), a night about 30 s. Each night's challenger trains on the same train
split from the same seed, so only its selection differs from night to night: the 60 nights
gave 12 distinct challengers. **simulate** (:mod:`benchmarks.gate_twins_sim`): about 1
CPU-second a daily year and 19 a minute year at the shipped 2000 resamples (7 at
``--resamples 400``, labelled in its JSON as not the shipped setting; the 10 years 700–709
decided the same at both).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import ROOT, build_market, seeds_of
from benchmarks.evidence import gate_twins_sim as sim
from benchmarks.evidence.gate import run_jobs, write

TWINS_JSON = ROOT / "docs/results/gate-twins.json"
PAIRS = (("challenger", "champion"), ("challenger", "buy_and_hold"), ("champion", "buy_and_hold"))


def returns(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    return values[1:] / values[:-1] - 1.0


def lag1(x: np.ndarray) -> float:
    """Lag-1 autocorrelation (NaN for a constant series)."""
    x = np.asarray(x, dtype=np.float64) - np.mean(x)
    denom = float(x @ x)
    return float(x[1:] @ x[:-1] / denom) if denom > 0 else math.nan


def pair_stats(a: np.ndarray, b: np.ndarray, per_year: float) -> dict[str, Any]:
    """Arm ``a`` against ``b`` (account values on the same bars): the difference of their
    per-bar returns after the first bar (the entry bar is counted apart), its annualised sd
    (tracking error), lag-1 autocorrelation and annualised mean (edge)."""
    diff = (returns(a) - returns(b))[1:]
    return {"te": float(diff.std(ddof=1) * math.sqrt(per_year)), "ar1": lag1(diff),
            "edge": float(diff.mean() * per_year), "diff": diff.tolist()}


def entry_costs(fs: Any, folders: dict[str, Path], window: tuple[int, int], curve: Any) -> dict[str, float]:
    """Each arm's cost of its first bar: its value there against the same arm with no costs,
    as a fraction of the initial cash (≈ first-bar turnover × ``env.cost_pct``)."""
    from tasks.model import bundle
    from trainers.common.evaluate import buy_and_hold, run_policy

    out, data, env = {}, None, None
    for name, folder in folders.items():
        actor, meta = bundle.load(folder)
        data, env = fs.market(norm=(np.asarray(meta.mean), np.asarray(meta.std))), meta.env
        free = run_policy(actor, data, meta.scales, replace(meta.env, cost_pct=0.0), window)
        out[name] = float((free[1] - curve[name].iloc[1]) / free[0])
    assert data is not None and env is not None
    free = buy_and_hold(data, replace(env, cost_pct=0.0), window)
    out["buy_and_hold"] = float((free[1] - curve["buy_and_hold"].iloc[1]) / free[0])
    return out


def truncated(fs: Any, last: int) -> Any:
    """The feature set as the cycle holds it when bar ``last`` is its newest: rows up to it,
    the train split's statistics and splits as they were (the test split cut at ``last``)."""
    from tasks.data.feature_set import ARRAYS

    arrays = {name: np.ascontiguousarray(getattr(fs, name)[: last + 1]) for name in ARRAYS}
    splits = {k: (lo, min(hi, last)) for k, (lo, hi) in fs.splits.items()}
    return replace(fs, **arrays, splits=splits)


def digest(folder: Path) -> str:
    """Short hash of a bundle's weights: equal challengers across nights have equal digests."""
    return hashlib.sha256((folder / "policy.pt").read_bytes()).hexdigest()[:12]


def garch_fit(r: np.ndarray) -> dict[str, float]:
    """GARCH(1,1) with Student-t errors on per-bar returns (in percent), as ``arch`` fits it."""
    from arch import arch_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = arch_model(100 * r, mean="Constant", vol="GARCH", p=1, q=1, dist="t").fit(disp="off")
    p = fit.params
    return {"omega": float(p["omega"]), "alpha": float(p["alpha[1]"]), "beta": float(p["beta[1]"]),
            "nu": float(p["nu"]), "mu": float(p["mu"])}


def measure_seed(job: tuple[str, int, int, int, list[str], int | None]) -> dict[str, Any]:
    """One market and seed: the champion, then ``nights`` CT challengers ``spacing`` bars apart,
    the last night on the market's last bar."""
    import torch

    from tasks.data import feature_set
    from tasks.model.backtest import backtest
    from tasks.model.train import train
    from tasks.model.walkforward import Champion, day, walk
    from trainers.common.evaluate import buy_and_hold
    from trainers.common.metrics import sharpe

    market, seed, nights, spacing, overrides, generations = job
    torch.set_num_threads(1)
    started, cpu = time.perf_counter(), time.process_time()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        extra = [f"evolution.generations={generations}"] if generations else []
        built = build_market(Path(tmp), market, seed, [*overrides, *extra])
        params, full, per_year = built.params, built.fs, built.per_year
        trained = train(params)
        champion_seconds = time.perf_counter() - started
        val_hi = full.splits["validation"][1]
        champion = Champion("1", params.dirs.models, day(full.timestamps[val_hi]), "pipeline")
        last, eval_bars = len(full.timestamps) - 1, params.ct.eval_bars
        cutoffs = [last - spacing * k for k in reversed(range(nights))]
        if cutoffs[0] - eval_bars < val_hi:
            raise SystemExit(f"{market} {seed}: night {cutoffs[0]}'s window reaches the champion's selection "
                             f"(to bar {val_hi}); fewer --nights or a smaller --spacing")
        hold = buy_and_hold(full.market(), params.env, (full.splits["train"][0], last))
        for t in cutoffs:
            clock = time.perf_counter()
            night = params.model_copy(update={"data_dir": Path(tmp) / f"night-{t}"})
            night.dirs.features.mkdir(parents=True)
            fs = truncated(full, t)
            feature_set.save(fs, night.dirs.features)
            walked = walk(night, champion)
            w, plan = walked.windows, walked.plan
            result = train(night, f"{market}-{seed}-night-{t}", plan)
            tested = backtest(night, walked)
            curve = tested.curve
            folders = {"challenger": plan.out, "champion": champion.folder}
            assert plan.out is not None
            row: dict[str, Any] = {
                "market": market, "seed": seed, "night": t, "first": w.first, "last": w.last,
                "cutoff": w.cutoff, "seen": tested.seen, "warm": plan.start, "digest": digest(plan.out),
                "champion_digest": digest(champion.folder), "best_generation": result.best_generation,
                "best_agent": result.best_agent, "train_seconds": result.seconds,
                "sharpe": {c: sharpe(curve[c].to_numpy(), per_year) for c in curve.columns},
                "entry": entry_costs(fs, folders, w.eval, curve),
                "market_vol": float(returns(curve["buy_and_hold"].to_numpy())[1:].std(ddof=1) * math.sqrt(per_year)),
                "pairs": {f"{a} - {b}": pair_stats(curve[a].to_numpy(), curve[b].to_numpy(), per_year)
                          for a, b in PAIRS}}
            row["seconds"] = time.perf_counter() - clock
            rows.append(row)
            d = row["pairs"]["challenger - champion"]
            print(f"{market} {seed} night {t} ({w.first}..{w.last}): {row['seconds']:.0f} s, vs champion TE "
                  f"{d['te']:.4f} AR1 {d['ar1']:+.2f} edge {d['edge']:+.4f}, entry {row['entry']}", flush=True)
            shutil.rmtree(night.data_dir, ignore_errors=True)
    r = returns(hold)
    return {"market": market, "seed": seed, "per_year": per_year, "champion_seconds": champion_seconds,
            "champion_fitness": trained.best_fitness, "seconds": time.perf_counter() - started,
            "cpu_seconds": time.process_time() - cpu, "nights": rows,
            "hold": {"vol": float(r.std(ddof=1) * math.sqrt(per_year)), "sharpe": sharpe(hold, per_year),
                     "bars": int(r.size), "garch": garch_fit(r)},
            "config": {"cost_pct": params.env.cost_pct, "eval_bars": eval_bars, "ct_generations": params.ct.generations,
                       "generations": params.evolution.generations, "decide_every": params.env.decide_every}}


def _pooled(rows: list[dict[str, Any]], pair: str) -> dict[str, Any]:
    """Over every measured window of ``pair``: per-window median and range of tracking error,
    AR(1) and edge, and the pooled tracking error (root mean variance) and AR(1)
    (Σ x_t x_{t−1} / Σ x_t² of the windows' demeaned differences: less biased than one
    short window's)."""
    windows = [np.asarray(n["pairs"][pair]["diff"]) for r in rows for n in r["nights"]]
    per_year = rows[0]["per_year"]
    out: dict[str, Any] = {}
    for key in ("te", "ar1", "edge"):
        values = [n["pairs"][pair][key] for r in rows for n in r["nights"]]
        values = [v for v in values if math.isfinite(v)]
        out[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)} if values else None
    centred = [w - w.mean() for w in windows]
    num = sum(float(c[1:] @ c[:-1]) for c in centred)
    den = sum(float(c @ c) for c in centred)
    out["pooled_te"] = math.sqrt(statistics.fmean(float(w.var(ddof=1)) for w in windows) * per_year)
    out["pooled_ar1"] = num / den if den > 0 else 0.0
    edges = [float(w.mean()) * per_year for w in windows]
    out["edge_t"] = statistics.fmean(edges) / (statistics.stdev(edges) / math.sqrt(len(edges))) \
        if len(edges) > 1 and statistics.stdev(edges) > 0 else math.nan
    return out


def summarise(result: dict[str, Any]) -> dict[str, Any]:
    """The measured twins in short, and the :class:`TwinModel` they give."""
    rows = result["rows"]
    nights = [n for r in rows for n in r["nights"]]
    pairs = {f"{a} - {b}": _pooled(rows, f"{a} - {b}") for a, b in
             (("challenger", "champion"), ("challenger", "buy_and_hold"), ("champion", "buy_and_hold"))}
    entry = {arm: {"median": statistics.median(n["entry"][arm] for n in nights),
                   "min": min(n["entry"][arm] for n in nights), "max": max(n["entry"][arm] for n in nights)}
             for arm in ("challenger", "champion", "buy_and_hold")}
    vol = math.sqrt(statistics.fmean(r["hold"]["vol"] ** 2 for r in rows))
    garch = tuple(statistics.median(r["hold"]["garch"][k] for r in rows) for k in ("alpha", "beta", "nu"))
    champ = pairs["champion - buy_and_hold"]
    policy_entry = max(entry["challenger"]["median"], entry["champion"]["median"], entry["buy_and_hold"]["median"])
    twin = pairs["challenger - champion"]
    model = sim.TwinModel(rows[0]["per_year"], vol, max(0.0, statistics.median(r["hold"]["sharpe"] for r in rows)),
                          garch, champ["pooled_te"], champ["pooled_ar1"], twin["pooled_te"], twin["pooled_ar1"],
                          policy_entry, entry["buy_and_hold"]["median"])
    return {"challengers": len(nights), "market_seeds": [f"{r['market']} {r['seed']}" for r in rows],
            "distinct_challengers": len({n["digest"] for n in nights}),
            "same_as_champion": sum(n["digest"] == n["champion_digest"] for n in nights),
            "pairs": pairs, "entry": entry, "hold": {"vol": vol, "sharpe": [r["hold"]["sharpe"] for r in rows],
                                                     "garch": garch},
            "model": asdict(model)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="train real CT challengers and measure them against the champion")
    m.add_argument("--seeds", type=seeds_of, default=seeds_of("600-605"), help="never used before: 600-609")
    m.add_argument("--markets", nargs="+", default=["null", "learnable"], choices=("null", "learnable"),
                   help="seeds are dealt to the markets in turn")
    m.add_argument("--nights", type=int, default=6, help="challengers per market-seed")
    m.add_argument("--spacing", type=int, default=21, help="bars between two measured nights")
    m.add_argument("--generations", type=int, help="the champion's evolution.generations (default params.yaml's)")
    m.add_argument("--set", "-s", dest="overrides", action="append", default=[])
    m.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    m.add_argument("--json", type=Path, default=TWINS_JSON)
    s = sub.add_parser("simulate", help="null CT years from the measured twins, through the real gate")
    sim.add_arguments(s)
    r = sub.add_parser("report", help="the measured twins' statistics from a measure --json")
    r.add_argument("json", type=Path, nargs="?", default=TWINS_JSON)
    args = parser.parse_args()
    line = " ".join([".venv/bin/python -m benchmarks.evidence.gate_twins", *sys.argv[1:]])
    if args.command == "simulate":
        sim.main(args, line)
        return
    if args.command == "report":
        print(json.dumps(summarise(json.loads(args.json.read_text())), indent=1))
        return
    jobs = [(args.markets[i % len(args.markets)], seed, args.nights, args.spacing, args.overrides, args.generations)
            for i, seed in enumerate(args.seeds)]
    started = time.perf_counter()
    rows = run_jobs(measure_seed, jobs, args.jobs)
    result = {"command": line, "minutes": (time.perf_counter() - started) / 60, "rows": rows,
              "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    result["summary"] = summarise(result)
    write(result, args.json)
    print(json.dumps(result["summary"], indent=1))


if __name__ == "__main__":
    main()
