"""The headline's generation timed as it runs, on the device script's run (benchmarks/perf/gpu.py,
its headline section): the share of a rollout, an update and an evaluation, the rollout's env
steps/s with the policy in the loop, and what keeping the PPO across generations saves at the
start of each (docs/training.md, what a generation keeps). trainers/, torch and numpy only."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

import torch

from benchmarks.perf.gpu_common import Args, paper_evolution, sync
from trainers.common.env import MarketData
from trainers.config import RuntimeConfig
from trainers.population.config import EvolutionConfig
from trainers.ppo.agent import PPOAgent
from trainers.ppo.multiplex import Multiplexed
from trainers.ppo.ppo import PPO


def first_generation(data: MarketData, train: tuple[int, int], validation: tuple[int, int], shapes: dict[str, int],
                     evo: EvolutionConfig, runtime: RuntimeConfig) -> Multiplexed:
    """The headline's first generation, untrained, as one batched model."""
    run = paper_evolution(data, train, validation, shapes, evo, runtime)
    setting = run.setting
    return Multiplexed(setting, [setting.agent(h, s) for h, s in zip(run.state.hparams, run.state.seeds)])


def compiled_split(args: Args, data: MarketData, windows: dict[str, tuple[int, int]], shapes: dict[str, int],
                   evo: EvolutionConfig, mode: str) -> dict[str, Any]:
    """The headline's generation as it runs, compiled and recorded: seconds of a rollout, an
    update and one evaluation of the whole validation window (the second: the first records its
    decision, which the kept evaluation then replays), the device drained after each
    (a replayed graph has no operations inside for RL-Scope to see), and their shares of a
    generation of ``iterations_per_generation`` iterations and one evaluation; and the rollout's
    env steps/s: the env on the headline's market with the policy in the loop, where the env
    section's figure is the env alone on a small market with a fixed action."""
    pop = first_generation(data, windows["train"], windows["validation"], shapes, evo, RuntimeConfig(compile=mode))
    dev = torch.device(args.device)
    group = list(range(len(pop.agents)))
    rows = [r for i in group for r in pop.rows[i]]
    for _ in range(2):  # compiled, then recorded
        pop.train_iteration(group)
    seconds: dict[str, float] = {}
    for name, step in (("rollout", lambda: pop.ppo.collect(rows)), ("evaluation", pop.evaluate)):
        sync(dev)
        started = time.perf_counter()
        rollout = step()
        sync(dev)
        seconds[name] = time.perf_counter() - started
        if name == "rollout":
            started = time.perf_counter()
            pop.ppo.update(rows, rollout)
            sync(dev)
            seconds["update"] = time.perf_counter() - started
    sync(dev)
    started = time.perf_counter()
    pop.evaluate()  # on the evaluation the first one made and recorded (trainers/ppo/multiplex.py::Evaluation)
    sync(dev)
    seconds["first_evaluation"], seconds["evaluation"] = seconds["evaluation"], time.perf_counter() - started
    assert pop.evaluation is not None
    pop.evaluation.passes.release()
    iteration = seconds["rollout"] + seconds["update"]  # six more, two of them recorded anew, and a new PPO's buffers
    start = generation_start(pop, dev) if args.remaining() > 8 * iteration + 20 else {
        "skipped": f"{args.remaining():.0f} s left, about {8 * iteration + 20:.0f} s needed"}
    per = evo.iterations_per_generation
    generation = per * iteration + seconds["evaluation"]
    shares = {"rollout": per * seconds["rollout"] / generation, "update": per * seconds["update"] / generation,
              "evaluation": seconds["evaluation"] / generation}
    steps = sum(pop.agents[i].samples_per_iteration for i in group)
    return {"mode": mode, "seconds": seconds, "shares_of_generation": shares, "rollout_env_steps": steps,
            "rollout_env_steps_per_s": steps / seconds["rollout"], "generation_start": start}


def generation_start(pop: Multiplexed, device: torch.device) -> dict[str, Any]:
    """What keeping the PPO from one generation to the next saves (trainers/ppo/multiplex.py::
    KeptPPO): seconds of two more iterations of ``pop`` (warmed up and recorded), then of a
    next generation's first two on ``pop``'s PPO reloaded in place, then on a new PPO, which
    makes its buffers and warms up and records its steps again; the device drained around
    each. ``pop`` is finished and released."""
    group = list(range(len(pop.agents)))

    def iterations(make: Callable[[], Multiplexed]) -> tuple[float, Multiplexed]:
        sync(device)
        started = time.perf_counter()
        made = make()
        for _ in range(2):
            made.train_iteration(group)
        sync(device)
        return time.perf_counter() - started, made

    def next_generation(kept: PPO | None) -> Multiplexed:
        agents = [PPOAgent.of(pop.setting, agent.cfg.hparams(), i, state)
                  for i, (agent, state) in enumerate(zip(pop.agents, states))]
        return Multiplexed(pop.setting, agents, kept)

    steady, _ = iterations(lambda: pop)
    states = pop.finish()
    kept, reloaded = iterations(lambda: next_generation(pop.ppo))
    reloaded.ppo.release()
    gc.collect()  # the kept buffers and graphs, before the new PPO makes its own
    if device.type == "cuda":
        torch.cuda.empty_cache()
    rebuilt, fresh = iterations(lambda: next_generation(None))
    fresh.finish()
    fresh.ppo.release()
    return {"iterations": 2, "running_seconds": steady, "kept_seconds": kept, "rebuilt_seconds": rebuilt,
            "reloaded": reloaded.ppo is pop.ppo, "saved_seconds": rebuilt - kept}
