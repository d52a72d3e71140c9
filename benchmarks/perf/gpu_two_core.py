"""The 2-core agent beside the GPU headline (benchmarks/perf/gpu_train.py): what this project's
2-core machine trains on the headline's own market, so the GPU's compute is judged by what it
buys on the test year, not by its speed alone (docs/results.md, the paper-scale market on one GPU).

The market is the headline's (:func:`benchmarks.perf.gpu_market.minute_market`, built from one
seeded CPU generator, so the same bars on either machine); the budget is params.paper.yaml's
(4 agents, 16 generations of 4 iterations of 32 envs × 128 steps, about 1.3 M env steps, 2
passes over each rollout) and the search space the headline's. Run here, on 2 CPU cores, before
the device run; its JSON goes beside the CPU's other sections (``docs/results/gpu-cpu``) and the
record puts its test year beside the device's:

    .venv/bin/python -m benchmarks.perf.gpu_two_core --out docs/results/gpu-cpu
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import ROOT
from benchmarks.perf.gpu_common import TINY, paper_evolution
from benchmarks.perf.gpu_market import minute_market
from benchmarks.perf.gpu_train import SEARCH, scored_test_year
from benchmarks.perf.tree import tree_state
from tasks.config import load_params
from trainers.population.config import EvolutionConfig
from trainers.ppo.multiplex import KeptPPO

SHAPES = ("num_envs", "horizon", "batch_size", "repeat_times")
BUDGET = ("population", "generations", "iterations_per_generation", "eval_interval")
TINY_BUDGET = {"population": 2, "generations": 2, "iterations_per_generation": 1, "eval_interval": 1}


def budget(tiny: bool = False) -> tuple[EvolutionConfig, dict[str, int]]:
    """params.paper.yaml's evolution budget and PPO shapes (``tiny``: toy ones), with the
    headline's search space."""
    paper = load_params(ROOT / "params.paper.yaml")
    sizes = TINY_BUDGET if tiny else {k: getattr(paper.evolution, k) for k in BUDGET}
    shapes = TINY if tiny else {k: getattr(paper.ppo, k) for k in SHAPES}
    return EvolutionConfig(**sizes, search_space=dict(SEARCH), seed=0), shapes


def two_core_agent(tiny: bool = False, threads: int = 2) -> dict[str, Any]:
    """Train the 2-core budget on the headline's market on the CPU; its env steps, seconds and
    test year (the best validation snapshot, buy-and-hold beside it)."""
    torch.set_num_threads(threads)
    started = time.perf_counter()
    market = minute_market(8, 12) if tiny else minute_market(100, 2520)
    built = time.perf_counter() - started
    data, windows = market.data, market.windows
    evo, shapes = budget(tiny)
    run = paper_evolution(data, windows["train"], windows["validation"], shapes, evo)
    started = time.perf_counter()
    generations = 0

    def progress(best: Any) -> None:
        nonlocal generations
        generations += 1
        print(json.dumps({"generation": generations, "seconds": round(time.perf_counter() - started, 1),
                          "env_steps": best.env_steps, "best_validation_sharpe": best.best_fitness}), flush=True)

    with KeptPPO() as runner:
        run.run(on_generation=progress, runner=runner)
    result = run.best()
    seconds = time.perf_counter() - started
    return {"market": {"stocks": market.stocks, "sessions": market.sessions, "seconds": built},
            "config": {**asdict(evo), "repeat_times": shapes["repeat_times"]},
            "threads": threads, "env_steps": result.env_steps, "train_seconds": seconds,
            "best_validation_sharpe": result.best_fitness,
            "test": scored_test_year(data, windows, result, market.per_year), "tree": tree_state()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the CPU's folder of the device script's JSON")
    parser.add_argument("--tiny", action="store_true", help="toy sizes: the code path in seconds (tests)")
    args = parser.parse_args()
    out = two_core_agent(args.tiny)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "two_core.json").write_text(json.dumps(out, indent=1))
    test = out["test"]
    print(f"2-core agent: {out['env_steps'] / 1e6:.2f} M env steps in {out['train_seconds']:.0f} s; test Sharpe "
          f"{test['agent']['sharpe']:.2f} (buy-and-hold {test['buy_and_hold']['sharpe']:.2f})")


if __name__ == "__main__":
    main()
