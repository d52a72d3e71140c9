"""The evaluator's window in chunks side by side against its single pass
(trainers/common/evaluate.py, :func:`~trainers.common.evaluate.chunk_plan`): the same policies'
validation fitness both ways, how far it moves, whether the ranking and the chosen agent
hold, and the seconds each takes. The headline runs it on its final population
(benchmarks/perf/gpu_train.py); here it runs on a population trained on a small minute
market, development seeds 0–4 (docs/evolution.md, parallel evaluation):

    .venv/bin/python -m benchmarks.perf.gpu_eval --json docs/results/dev/chunked-eval.json

trainers/, torch and numpy only.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.perf.gpu_common import paper_env, paper_ppo, scales_of
from benchmarks.perf.gpu_market import minute_market
from trainers.common.env import MarketData
from trainers.common.evaluate import WARMUP, run_policies
from trainers.common.metrics import sharpe
from trainers.common.nets import Actor, ActorShape, new_actor
from trainers.common.state import StateScales
from trainers.config import CompileMode
from trainers.population.config import EvolutionConfig
from trainers.population.evolution import Evolution
from trainers.ppo.multiplex import run_multiplexed

CHUNKS = (4, 16, 64)


def actors_of(data: MarketData, scales: StateScales, states: Sequence[dict[str, torch.Tensor]]) -> list[Actor]:
    """The paper config's per-stock actors with ``states``' weights, on the data's device."""
    ppo = paper_ppo()
    shape = ActorShape.of(data.n_stocks, data.n_features, scales, ppo.policy)
    actors = []
    for state in states:
        actor = new_actor(shape, ppo.net_dims, ppo.init_log_std)
        actor.load_state_dict({k: v.cpu() for k, v in state.items()})
        actors.append(actor.to(data.close.device))
    return actors


def chunk_check(data: MarketData, scales: StateScales, window: tuple[int, int], actors: Sequence[Actor],
                per_year: float, compile: CompileMode = "eager", chunks: Sequence[int] = CHUNKS) -> dict[str, Any]:
    """Each actor's Sharpe on ``window`` in one pass and in each of ``chunks`` stretches side by
    side; per chunk count, the largest change, the rank correlation, whether the best agent
    is the same, and the seconds (the device's queue drained). The yardstick beside them: the
    single pass started flat :data:`~trainers.common.evaluate.WARMUP` bars earlier and scored
    from the same bar, a choice the evaluator makes as arbitrarily as where a chunk starts."""
    env = paper_env()

    def policy(states: torch.Tensor) -> torch.Tensor:  # account i's chunks are rows i·C … i·C + C − 1
        rows = states.view(len(actors), -1, states.shape[-1])
        return torch.cat([actor(rows[i]) for i, actor in enumerate(actors)])

    def scored(count: int) -> tuple[list[float], float]:
        sync = torch.cuda.synchronize if data.close.device.type == "cuda" else (lambda: None)
        sync()
        started = time.perf_counter()
        values = run_policies(policy, data, scales, env, window, len(actors), compile, chunks=count)
        sync()
        return [sharpe(values[:, i], per_year) for i in range(len(actors))], time.perf_counter() - started

    single, seconds = scored(1)
    early = window[0] - WARMUP // env.decide_every * env.decide_every  # on the single pass's decision grid
    values = run_policies(policy, data, scales, env, (early, window[1]), len(actors), compile)[window[0] - early:]
    earlier = [sharpe(values[:, i], per_year) for i in range(len(actors))]
    out: dict[str, Any] = {"agents": len(actors), "bars": window[1] - window[0], "single": single,
                           "single_seconds": seconds, "chunked": [], "started_earlier": {
                               "bars": window[0] - early, "sharpe": earlier,
                               "largest_change": max(abs(a - b) for a, b in zip(single, earlier)),
                               "rank_correlation": _spearman(single, earlier),
                               "same_best": int(np.argmax(single)) == int(np.argmax(earlier))}}
    for count in chunks:
        mine, spent = scored(count)
        out["chunked"].append({"chunks": count, "sharpe": mine, "seconds": spent,
                               "largest_change": max(abs(a - b) for a, b in zip(single, mine)),
                               "rank_correlation": _spearman(single, mine),
                               "same_best": int(np.argmax(single)) == int(np.argmax(mine))})
    return out


def _spearman(a: Sequence[float], b: Sequence[float]) -> float:
    ranks = [np.argsort(np.argsort(x)).astype(float) for x in (a, b)]
    if len(a) < 2 or ranks[0].std() == 0 or ranks[1].std() == 0:
        return float("nan")
    return float(np.corrcoef(*ranks)[0, 1])


def trained(seed: int, generations: int) -> dict[str, Any]:
    """:func:`chunk_check` of the final population of a short evolution on a small minute market."""
    market = minute_market(20, 240, seed=seed)
    data, windows = market.data, market.windows
    scales = scales_of(data, windows["train"][0])
    evo = EvolutionConfig(population=8, generations=generations, iterations_per_generation=4, eval_interval=4,
                          seed=seed, search_space={"lr": (2.0**-16, 2.0**-10), "entropy_coef": (0.002, 0.05)})
    run = Evolution(data, scales, paper_env(), paper_ppo(num_envs=32, horizon=128, batch_size=1024), evo,
                    windows["train"], windows["validation"], market.per_year)
    run.run(runner=run_multiplexed)
    actors = actors_of(data, scales, [lead.actor for lead in run.best().leaders])
    return chunk_check(data, scales, windows["validation"], actors, market.per_year) | {"seed": seed}


def table(results: Sequence[dict[str, Any]]) -> str:
    """Per way of evaluating, over the seeds: the mean largest change, the mean rank
    correlation, how often the best agent is the same, and the mean seconds."""
    lines = ["| evaluation | largest Sharpe change (mean) | rank correlation (mean) | same best | seconds |",
             "|---|---:|---:|---:|---:|",
             f"| one pass | - | - | - | {np.mean([r['single_seconds'] for r in results]):.1f} |"]
    ways = [(f"one pass, started {results[0]['started_earlier']['bars']} bars earlier",
             [r["started_earlier"] for r in results])]
    ways += [(f"{row['chunks']} chunks", [r["chunked"][k] for r in results])
             for k, row in enumerate(results[0]["chunked"])]
    for name, rows in ways:
        seconds = f"{np.mean([r['seconds'] for r in rows]):.1f}" if "seconds" in rows[0] else "-"
        lines.append(f"| {name} | {np.mean([r['largest_change'] for r in rows]):.3f} | "
                     f"{np.nanmean([r['rank_correlation'] for r in rows]):.2f} | "
                     f"{sum(r['same_best'] for r in rows)} of {len(rows)} | {seconds} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--generations", type=int, default=3)
    args = parser.parse_args()
    results = []
    for seed in args.seeds:
        results.append(trained(seed, args.generations))
        print(f"seed {seed}: {results[-1]['agents']} agents, {results[-1]['bars']:,} validation bars", flush=True)
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps({"generations": args.generations, "market": "minute_market(20, 240, seed)",
                                         "seeds": results}, indent=1))


if __name__ == "__main__":
    main()
