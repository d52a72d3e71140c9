"""Nitro ablation (docs/evolution.md, Nitro boosting): boosted against static env counts at an equal env-step budget.

One PPO agent per run on the default embedded market (our own stages 1–3), PPO defaults
(Table 3). ``static`` keeps ``ppo.num_envs`` envs every round; ``boosted`` lets Nitro pick
each round's count in [``nitro.min_envs``, ``nitro.max_envs``] from the Hessian's
convexity ratio (nitro §5). Both stop when the hard budget
(``evolution.budget_env_steps``) cannot pay for another round. Each seed runs both arms;
the evaluator keeps each run's best validation snapshot, which is then scored on the
test window. Prints a table, records it in docs/benchmarks-archive.md (the section's latest reading
and a row of its history) and draws docs/img/benchmark_nitro.png (env count per round,
validation Sharpe against env steps).

    make install && .venv/bin/python -m benchmarks.archive.nitro              # 5 seeds, about 15 minutes
    .venv/bin/python -m benchmarks.archive.nitro --seeds 2 --budget 40000     # quicker
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from matplotlib.figure import Figure

from benchmarks.common import ARCHIVE, ROOT, Reading, blank_actor, commit, default_features, now, record
from tasks.model.plan import state_scales
from trainers.common.evaluate import run_policy
from trainers.common.metrics import performance, periods_per_year
from trainers.population.config import EvolutionConfig
from trainers.population.evolution import Evolution


def run(arm: str, seed: int, budget: int, params, fs) -> dict:
    """One agent trained until the budget is spent; its best validation snapshot on test."""
    data, scales = fs.market(), state_scales(params, fs)
    per_year = periods_per_year(params.data.freq)
    nitro = dataclasses.replace(params.nitro, enabled=arm == "boosted")
    cfg = EvolutionConfig(population=1, generations=1, iterations_per_generation=10_000, eval_interval=2,
                          fitness=params.evolution.fitness, search_space={}, budget_env_steps=budget, seed=seed)
    started = time.perf_counter()
    evo = Evolution(data, scales, params.env, params.ppo, cfg, fs.window("train"), fs.window("validation"), per_year,
                    nitro)
    result = evo.run()
    seconds = time.perf_counter() - started
    actor = blank_actor(data, scales, params.ppo)
    actor.load_state_dict(result.best_actor)
    test = performance(run_policy(actor, data, scales, params.env, fs.window("test")), per_year)
    trained = [r for r in result.history if not r.stopped]
    return {"arm": arm, "seed": seed, "validation": result.best_fitness, "test_sharpe": test["sharpe"],
            "test_return": test["cumulative_return"], "env_steps": result.cost.env_steps,
            "cpu_seconds": result.cost.cpu_seconds, "seconds": seconds, "rounds": trained[-1].iteration,
            "envs": [r.hparams["num_envs"] for r in trained],
            "curve": [(r.env_steps, r.fitness) for r in trained]}


def mean_std(values: list[float], fmt: str = ".2f") -> str:
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):{fmt}} ± {sd:{fmt}}"


def table(rows: list[dict]) -> str:
    columns = (("validation", ".2f"), ("test_sharpe", ".2f"), ("test_return", ".2f"), ("rounds", ".0f"),
               ("env_steps", ",.0f"), ("cpu_seconds", ".0f"), ("seconds", ".0f"))
    lines = ["| arm | best validation Sharpe | its test Sharpe | its test return | rounds | env steps | CPU s "
             "| wall s |", "|---|---|---|---|---|---|---|---|"]
    for arm in ("static", "boosted"):
        sub = [r for r in rows if r["arm"] == arm]
        lines.append(f"| {arm} | " + " | ".join(mean_std([r[k] for r in sub], fmt) for k, fmt in columns) + " |")
    diffs = [b["validation"] - s["validation"] for s, b in zip(*(sorted((r for r in rows if r["arm"] == a),
                                                                        key=lambda r: r["seed"])
                                                                 for a in ("static", "boosted")))]
    if len(diffs) > 1 and statistics.stdev(diffs) > 0:
        t = statistics.fmean(diffs) / (statistics.stdev(diffs) / math.sqrt(len(diffs)))
        lines.append(f"\nPaired by seed, boosted − static best validation Sharpe: {mean_std(diffs)} (t = {t:+.2f}, "
                     f"{len(diffs)} seeds).")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    figure = Figure(figsize=(10, 4), layout="constrained")
    envs, curves = figure.add_subplot(1, 2, 1), figure.add_subplot(1, 2, 2)
    for r in rows:
        colour = "C1" if r["arm"] == "boosted" else "C0"
        if r["arm"] == "boosted":
            envs.plot(range(1, len(r["envs"]) + 1), r["envs"], color=colour, alpha=0.6)
        curves.plot(*zip(*r["curve"]), color=colour, alpha=0.5, label=r["arm"] if r["seed"] == 0 else None)
    envs.set(xlabel="evaluation (every 2 rounds)", ylabel="envs chosen for the next round",
             title="Nitro's env count (each line a seed)")
    curves.set(xlabel="env steps spent", ylabel="validation Sharpe", title="Learning at equal budget")
    curves.legend()
    figure.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--budget", type=int, default=163_840, help="env steps per run (40 static rounds of 32x128)")
    parser.add_argument("--out", type=Path, default=ARCHIVE)
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        params, fs = default_features(Path(tmp))
        rows = []
        for seed in range(args.seeds):
            for arm in ("static", "boosted"):
                rows.append(run(arm, seed, args.budget, params, fs))
                print({k: v for k, v in rows[-1].items() if k not in ("envs", "curve")}, flush=True)
    text = table(rows)
    print(text)
    image = ROOT / "docs" / "img" / "benchmark_nitro.png"
    plot(rows, image)
    stamp = now()
    threads = f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} " if "OMP_NUM_THREADS" in os.environ else ""
    command = threads + " ".join([".venv/bin/python -m benchmarks.archive.nitro", *sys.argv[1:]])
    arm = {a: [r for r in rows if r["arm"] == a] for a in ("static", "boosted")}
    cpu = " vs ".join(f"{statistics.fmean(r['cpu_seconds'] for r in arm[a]):.0f}" for a in ("boosted", "static"))
    record(Reading(
        "nitro", "Nitro ablation: boosted vs static env counts at equal budget",
        f"Command: `{command}` ({(time.perf_counter() - started) / 60:.0f} min)  \n"
        f"Machine: {torch.get_num_threads()} CPU threads, torch {torch.__version__}. One agent per run, PPO "
        f"defaults, budget {args.budget:,} env steps; static = {params.ppo.num_envs} envs a round, boosted = "
        f"Nitro in [{params.nitro.min_envs}, {params.nitro.max_envs}] (window {params.nitro.window}, decay "
        f"{params.nitro.decay}). Best validation snapshot scored on the test window. Plot: "
        f"`docs/img/benchmark_nitro.png`.\n\n{text}",
        ("date", "commit", "command", "seeds", "static: test Sharpe", "boosted: test Sharpe",
         "CPU s, boosted vs static"),
        (stamp, commit(), f"`{command}`", str(args.seeds), mean_std([r["test_sharpe"] for r in arm["static"]]),
         mean_std([r["test_sharpe"] for r in arm["boosted"]]), cpu)), args.out)


if __name__ == "__main__":
    main()
