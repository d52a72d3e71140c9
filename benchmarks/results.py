"""Evidence for the evolution layer (issue 5 §10): does generational evolution find better
agents than one agent trained as long, on the **test** window, and does anything beat
buy-and-hold on a market with nothing to learn?

For each market (``learnable``: ``data.signal`` as in params.yaml; ``null``: signal 0) and
each seed ``s``, the market is built with ``data.seed = 7 + s`` by our own stages 1–3, then:

* **evolution**: params.yaml's population and schedule (``evolution.seed = s``), on the
  multiplexed engine; the model is the best validation snapshot (§4.2);
* **vanilla**: one agent with the PPO defaults, trained for the same number of env steps
  as the evolution spent; its **final** weights (plain PPO);
* **vanilla + evaluator**: the same run's best validation snapshot (the evaluator alone,
  without a population or selection);
* **buy-and-hold**: equal weight, same fills and costs.

All are scored on the test window, which no arm saw. Prints a table and writes
``docs/results.md`` (means ± std over seeds, paired differences with t statistics) and
``docs/img/results.png``.

    make install && .venv/bin/python benchmarks/results.py            # 5 seeds x 2 markets, about an hour
    .venv/bin/python benchmarks/results.py --seeds 2 --generations 2   # a quick look
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tasks.config import Params, load_params  # noqa: E402
from tasks.data import features, ingest, validate  # noqa: E402
from tasks.model.train import state_scales  # noqa: E402
from trainers.evaluate import buy_and_hold, run_policy  # noqa: E402
from trainers.evolution import Evolution, EvolutionConfig, evolve  # noqa: E402
from trainers.metrics import performance, periods_per_year  # noqa: E402
from trainers.multiplex import run_multiplexed  # noqa: E402
from trainers.ppo import Actor  # noqa: E402

ARMS = ("evolution", "vanilla", "vanilla + evaluator", "buy-and-hold")
METRICS = ("sharpe", "cumulative_return")


@dataclass
class Row:
    market: str
    seed: int
    arm: str
    sharpe: float
    cumulative_return: float
    validation: float
    """Validation fitness of the chosen weights (NaN for buy-and-hold and final weights)."""
    env_steps: int
    seconds: float


def market_params(root: Path, market: str, seed: int, overrides: list[str]) -> Params:
    signal = [] if market == "learnable" else ["data.signal=0"]
    return load_params(ROOT / "params.yaml", [f"data_dir={root / f'{market}-{seed}' / 'data'}", f"data.seed={7 + seed}",
                                              f"evolution.seed={seed}", *signal, *overrides])


def run_seed(params: Params, market: str, seed: int) -> list[Row]:
    """Build the market, train the three arms and score everything on the test window."""
    print(f"{market} market, seed {seed}: building the market", flush=True)
    for stage in (ingest.ingest, validate.validate, features.features):
        stage(params)
    fs = features.load(params.dirs.features)
    data, scales, env = fs.market(), state_scales(params, fs), params.env
    train, val, test = fs.window("train"), fs.window("validation"), fs.window("test")
    per_year = periods_per_year(params.data.freq)

    def score(arm: str, weights: dict, width_hparams: dict[str, float], fitness: float, steps: int,
              seconds: float) -> Row:
        actor = Actor(scales_dim, data.n_stocks, params.ppo.with_hparams(width_hparams).net_dims, 0.0)
        actor.load_state_dict(weights)
        metrics = performance(run_policy(actor, data, scales, env, test), per_year)
        return Row(market, seed, arm, metrics["sharpe"], metrics["cumulative_return"], fitness, steps, seconds)

    scales_dim = 1 + 2 * data.n_stocks + data.n_stocks * data.n_features
    print(f"{market} market, seed {seed}: evolution ({params.evolution.population} agents x "
          f"{params.evolution.generations} generations)", flush=True)
    started = time.perf_counter()
    evo = evolve(data, scales, env, params.ppo, params.evolution, train, val, per_year=per_year,
                 runner=run_multiplexed)
    rows = [score("evolution", evo.best_actor, evo.best_hparams, evo.best_fitness, evo.env_steps,
                  time.perf_counter() - started)]

    samples = params.ppo.num_envs * params.ppo.horizon
    iterations = max(1, math.ceil(evo.env_steps / samples))
    single = EvolutionConfig(population=1, generations=1, iterations_per_generation=iterations, quantile=0.0,
                             eval_interval=params.evolution.eval_interval, fitness=params.evolution.fitness,
                             search_space={}, seed=seed)
    print(f"{market} market, seed {seed}: vanilla ({iterations} iterations, {iterations * samples:,} env steps)",
          flush=True)
    started = time.perf_counter()
    run = Evolution(data, scales, env, params.ppo, single, train, val, per_year)
    vanilla = run.run()
    seconds = time.perf_counter() - started
    final = run.pop.states[0]["learners"][0]["actor"]
    base = params.ppo.hparams()
    rows.append(score("vanilla", final, base, math.nan, vanilla.env_steps, seconds))
    rows.append(score("vanilla + evaluator", vanilla.best_actor, base, vanilla.best_fitness, vanilla.env_steps,
                      seconds))
    hold = performance(buy_and_hold(data, env, test), per_year)
    rows.append(Row(market, seed, "buy-and-hold", hold["sharpe"], hold["cumulative_return"], math.nan, 0, 0.0))
    return rows


def mean_std(values: list[float]) -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.2f} ± {sd:.2f}"


def paired(rows: list[Row], market: str, a: str, b: str, metric: str) -> str:
    """Mean ± std of the per-seed difference a − b, and its t statistic (n − 1 dof)."""
    by = {(r.arm, r.seed): getattr(r, metric) for r in rows if r.market == market}
    diffs = [by[(a, s)] - by[(b, s)] for s in sorted({r.seed for r in rows if r.market == market})]
    if len(diffs) < 2:
        return f"{diffs[0]:+.2f}"
    sd = statistics.stdev(diffs)
    t = statistics.fmean(diffs) / (sd / math.sqrt(len(diffs))) if sd > 0 else math.inf
    return f"{statistics.fmean(diffs):+.2f} ± {sd:.2f} (t = {t:+.2f})"


def report(rows: list[Row], command: str, minutes: float) -> str:
    markets = sorted({r.market for r in rows}, key=lambda m: m != "learnable")
    seeds = sorted({r.seed for r in rows})
    lines = [f"Command: `{command}` (seeds {seeds[0]}..{seeds[-1]}, {minutes:.0f} min on this machine).", "",
             "| market | arm | test Sharpe | test cumulative return | validation fitness | env steps |",
             "|---|---|---|---|---|---|"]
    for market in markets:
        for arm in ARMS:
            sub = [r for r in rows if r.market == market and r.arm == arm]
            val = [r.validation for r in sub if not math.isnan(r.validation)]
            lines.append(f"| {market} | {arm} | {mean_std([r.sharpe for r in sub])} | "
                         f"{mean_std([r.cumulative_return for r in sub])} | {mean_std(val) if val else '-'} | "
                         f"{int(statistics.fmean([r.env_steps for r in sub])):,} |")
    lines += ["", "Paired per seed (same market, same seed), mean ± std of the difference and its t statistic:", "",
              "| market | comparison | Δ test Sharpe | Δ test cumulative return |", "|---|---|---|---|"]
    for market in markets:
        for a, b in (("evolution", "vanilla"), ("evolution", "vanilla + evaluator"), ("evolution", "buy-and-hold"),
                     ("vanilla", "buy-and-hold")):
            lines.append(f"| {market} | {a} − {b} | {paired(rows, market, a, b, 'sharpe')} | "
                         f"{paired(rows, market, a, b, 'cumulative_return')} |")
    return "\n".join(lines)


def plot(rows: list[Row], path: Path) -> None:
    """Test Sharpe of every arm and seed, per market."""
    markets = sorted({r.market for r in rows}, key=lambda m: m != "learnable")
    figure = Figure(figsize=(4.5 * len(markets), 4), layout="constrained")
    for k, market in enumerate(markets):
        axes = figure.add_subplot(1, len(markets), k + 1)
        for j, arm in enumerate(ARMS):
            values = [r.sharpe for r in rows if r.market == market and r.arm == arm]
            axes.scatter(np.full(len(values), j) + np.linspace(-0.1, 0.1, len(values)), values, color=f"C{j}", s=18)
            axes.errorbar(j + 0.25, statistics.fmean(values), yerr=statistics.stdev(values) if len(values) > 1 else 0,
                          fmt="s", color=f"C{j}", capsize=3)
        axes.axhline(0, color="grey", linewidth=0.6)
        axes.set_xticks(range(len(ARMS)), [a.replace(" + ", "\n+ ") for a in ARMS], fontsize=8)
        axes.set(title=f"{market} market: test window", ylabel="test Sharpe (each dot a seed)")
    figure.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--markets", nargs="+", default=["learnable", "null"], choices=["learnable", "null"])
    parser.add_argument("--set", "-s", dest="overrides", action="append", default=[],
                        help="override a params.yaml key for every run, e.g. -s evolution.generations=2")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results.md")
    parser.add_argument("--json", type=Path, help="also write every row here (and nothing to --out)")
    parser.add_argument("--merge", type=Path, nargs="+", help="report the rows of earlier --json runs")
    args = parser.parse_args()
    started, rows = time.perf_counter(), []
    if args.merge:
        rows = [Row(**row) for path in args.merge for row in json.loads(path.read_text())["rows"]]
        minutes = max(json.loads(path.read_text())["minutes"] for path in args.merge)
        command = " && ".join(json.loads(path.read_text())["command"] for path in args.merge)
        command += f"; then .venv/bin/python benchmarks/results.py --merge {' '.join(str(p) for p in args.merge)}"
    else:
        with tempfile.TemporaryDirectory() as tmp:
            for market in args.markets:
                for seed in range(args.seeds):
                    params = market_params(Path(tmp), market, seed, args.overrides)
                    for row in run_seed(params, market, seed):
                        rows.append(row)
                        print(json.dumps(row.__dict__), flush=True)
        minutes = (time.perf_counter() - started) / 60
        threads = f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} " if "OMP_NUM_THREADS" in os.environ else ""
        command = threads + " ".join([".venv/bin/python benchmarks/results.py", *sys.argv[1:]])
        if args.json:
            args.json.write_text(json.dumps({"command": command, "minutes": minutes,
                                             "rows": [r.__dict__ for r in rows]}, indent=1))
            return
    text = report(rows, command, minutes)
    print(text)
    image = args.out.parent / "img" / "results.png"
    image.parent.mkdir(parents=True, exist_ok=True)
    plot(rows, image)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    marker = "<!-- results.py writes below this line -->"
    head = args.out.read_text().split(marker)[0] if args.out.exists() else "# Results\n\n"
    figure = "![test Sharpe per seed](img/results.png)"
    args.out.write_text(f"{head}{marker}\n\n## Measured {stamp}\n\n{text}\n\n{figure}\n")


if __name__ == "__main__":
    main()
