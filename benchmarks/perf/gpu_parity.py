"""The device script's ``parity`` section (benchmarks/perf/gpu.py): one short evolution on the
CPU and on the device, drawing the same random numbers, compared evaluation by evaluation and
weight by weight; and a checkpoint written on one device and resumed on the other, both ways
(docs/training.md, GPU workers). Its short evolution and comparison also serve the ``dask``
section (benchmarks/perf/gpu_dask.py). trainers/, torch and numpy only."""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path
from typing import Any

from benchmarks.perf.gpu_common import TINY, Args, Stop, paper_env, paper_ppo, scales_of
from benchmarks.perf.gpu_market import sample_market
from benchmarks.perf.gpu_train import SEARCH
from trainers.common.env import MarketData
from trainers.config import RuntimeConfig
from trainers.population.config import EvolutionConfig
from trainers.population.evolution import Evolution, EvolutionResult
from trainers.ppo.multiplex import run_multiplexed


def tiny_evolution(args: Args, data: MarketData, runtime: RuntimeConfig, generations: int = 2) -> Evolution:
    """A short evolution of the paper's config at toy shapes, for the parity checks."""
    cfg = EvolutionConfig(population=2 if args.tiny else 4, generations=generations, iterations_per_generation=2,
                          eval_interval=2, search_space=dict(SEARCH), seed=3)
    ppo = paper_ppo(**TINY)
    bars = data.close.shape[0]
    return Evolution(data, scales_of(data, 0), paper_env(), ppo, cfg, (0, bars // 2), (bars // 2, bars - 1), 252.0,
                     runtime=runtime)


def section_parity(args: Args) -> dict[str, Any]:
    """One short evolution on the CPU (the default, grouped update) and on the device (the
    static update, recorded steps, random streams on the CPU so both draw the same numbers):
    best fitness, the agent selected, every evaluation's fitness and the weights; then a
    checkpoint written on one device and resumed on the other, both ways."""
    stocks = 4 if args.tiny else 30
    cpu_data = sample_market(stocks, 200 if args.tiny else 600, seed=0, device="cpu")
    dev_data = cpu_data.to(args.device)
    cpu = tiny_evolution(args, cpu_data, RuntimeConfig()).run(runner=run_multiplexed)
    dev = tiny_evolution(args, dev_data, RuntimeConfig(compile="graphs", rng="cpu")).run(runner=run_multiplexed)
    out: dict[str, Any] = {"cpu_best_fitness": cpu.best_fitness, "device_best_fitness": dev.best_fitness,
                           **compared(dev, cpu)}
    out["resume"] = {f"{a}->{b}": _resume(args, a, b, cpu_data) for a, b in (("cpu", args.device),
                                                                                (args.device, "cpu"))}
    return out


def compared(run: EvolutionResult, reference: EvolutionResult) -> dict[str, Any]:
    """Two runs' leaderboards side by side: how many evaluations, the largest difference of
    any evaluation's fitness and of the best actor's weights, and whether the same agent
    (and generation) was selected."""
    fitness = [abs(a.fitness - b.fitness) for a, b in zip(run.history, reference.history)]
    weights = max(float((a.cpu() - b.cpu()).abs().max()) for a, b in zip(run.best_actor.values(),
                                                                         reference.best_actor.values()))
    return {"evaluations": len(fitness), "same_evaluations": len(run.history) == len(reference.history),
            "max_fitness_diff": max(fitness), "max_best_actor_weight_diff": weights,
            "same_best_agent": (run.best_agent, run.best_generation) == (reference.best_agent,
                                                                          reference.best_generation)}


def _resume(args: Args, saved_on: str, resumed_on: str, data: MarketData) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = tiny_evolution(args, data.to(saved_on), RuntimeConfig(), generations=2)
        try:
            # generation 1 is saved, then the run stops
            first.run(checkpoint_dir=Path(tmp), on_generation=_stop_after_one, runner=run_multiplexed)
        except Stop:
            pass
        second = tiny_evolution(args, data.to(resumed_on), RuntimeConfig(), generations=2)
        second.load(Path(tmp) / Evolution.CHECKPOINT)
        result = second.run(runner=run_multiplexed)
    return {"generations": second.state.generation, "best_fitness": result.best_fitness,
            "warnings": sorted({str(w.message) for w in caught})}


def _stop_after_one(_: EvolutionResult) -> None:
    raise Stop
