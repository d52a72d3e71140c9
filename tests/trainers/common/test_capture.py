"""Recorded steps (trainers/common/capture.py) on the CPU: a CUDA graph replays the kernels it
recorded on the addresses it recorded, so a step that reads a tensor allocated anew each
time would replay on stale memory. A stand-in recorder logs the storages each call reads
that existed before it (its inputs) and fails when a later call reads others; the results
must equal the unrecorded run's. Compiled (Inductor) and eager steps agree within
COMPILED_ATOL after a generation."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch._dynamo.utils import counters
from torch.utils._python_dispatch import TorchDispatchMode

import trainers.common.evaluate
import trainers.ppo.ppo
import trainers.ppo.schedule
from tests.trainers.helpers import market, scales
from trainers.common.evaluate import run_policies
from trainers.config import EnvConfig, PPOConfig, RuntimeConfig
from trainers.population.config import EvolutionConfig
from trainers.population.evolution import Evolution
from trainers.ppo.agent import PPOAgent
from trainers.ppo.multiplex import KeptPPO, run_multiplexed
from trainers.ppo.ppo import PPO

ENV = EnvConfig(initial_cash=10_000.0, hmax=10, episode_len=8, min_episode_len=4, action="weights", decide_every=3)
CFG = PPOConfig(num_envs=4, horizon=6, batch_size=8, repeat_times=2, net_dims=(8,), policy="shared",
                credit="per_stock")
COMPILED_ATOL = 1e-5
"""Inductor fuses and reorders float32 arithmetic: weights after a generation agree to this."""


def _storages(tree: Any) -> list[int]:
    if isinstance(tree, torch.Tensor):
        return [tree.untyped_storage().data_ptr()] if tree.untyped_storage().nbytes() else []
    if isinstance(tree, (list, tuple)):
        return [p for item in tree for p in _storages(item)]
    if isinstance(tree, dict):
        return [p for item in tree.values() for p in _storages(item)]
    return []


class _Inputs(TorchDispatchMode):
    """The storages a block reads that it did not make."""

    def __init__(self) -> None:
        super().__init__()
        self.made: set[int] = set()
        self.read: set[int] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None):
        self.read.update(p for p in _storages((args, kwargs)) if p not in self.made)
        out = func(*args, **(kwargs or {}))
        self.made.update(_storages(out))
        return out


class StandIn:
    """Recorded's calling pattern without CUDA: the first call warms up, the second "records"
    the inputs it reads, every later call must read exactly those."""

    instances: list[StandIn] = []

    def __init__(self, step: Callable[[], None], enabled: bool) -> None:
        self.step, self.enabled, self.calls = step, enabled, 0
        self.recorded: set[int] | None = None
        StandIn.instances.append(self)

    def __call__(self) -> None:
        self.calls += 1
        if self.calls == 1 or not self.enabled:
            self.step()
            return
        with _Inputs() as inputs:
            self.step()
        if self.recorded is None:
            self.recorded = inputs.read
        assert inputs.read == self.recorded, "a recorded step read a tensor that was not there when it was recorded"


@pytest.fixture
def recording(monkeypatch: pytest.MonkeyPatch) -> None:
    StandIn.instances.clear()
    for module in (trainers.ppo.schedule, trainers.common.evaluate):
        monkeypatch.setattr(module, "Recorded", StandIn)
    for module in (trainers.ppo.ppo, trainers.common.evaluate):
        monkeypatch.setattr(module, "capturing", lambda device, mode: mode != "eager")


def population(runtime: RuntimeConfig, static: bool | None = None) -> PPO:
    data = market(t=60)
    agents = [PPOAgent(data, scales(data, ENV), ENV, CFG.with_hparams(h), (0, 50), seed)
              for seed, h in ((1, {"num_envs": 4}), (2, {"num_envs": 3, "net_width": 6, "repeat_times": 3}))]
    return PPO([lrn for a in agents for lrn in a.learners], [e for a in agents for e in a.envs], CFG, runtime,
               static=static)


def trained(ppo: PPO, iterations: int = 4) -> list[torch.Tensor]:
    for _ in range(iterations):
        ppo.train_iteration([0, 1])
    for _ in range(3):
        ppo.train_iteration([1])  # a part of the population: a group of its own
    return [p.clone() for p in ppo.nets.params]


def test_recorded_rollouts_and_updates_read_the_same_tensors_every_time(recording):
    recorded = trained(population(RuntimeConfig(compile="graphs")))
    plain = trained(population(RuntimeConfig(compile="eager"), static=True))  # the same schedule, unrecorded
    recorders = [s for s in StandIn.instances if s.enabled]
    assert len(recorders) == 4 and min(s.calls for s in recorders) > 2  # a rollout and an update step per group
    for a, b in zip(recorded, plain):
        assert torch.equal(a, b)


def test_a_recorded_evaluation_reads_the_same_tensors_and_gives_the_same_curve(recording):
    data = market(t=60)
    nets = population(RuntimeConfig()).nets

    def policy(states: torch.Tensor) -> torch.Tensor:
        return torch.tanh(nets.mean(states.unsqueeze(1))).squeeze(1)

    window = (5, 45)  # 40 bars: 13 full decisions of 3 and a last one of 1
    recorded = run_policies(policy, data, scales(data, ENV), ENV, window, accounts=2, compile="graphs")
    plain = run_policies(policy, data, scales(data, ENV), ENV, window, accounts=2)
    assert StandIn.instances[-1].calls == 13
    assert recorded.shape == plain.shape == (41, 2) and (recorded == plain).all()


def test_a_planted_fresh_buffer_is_caught(recording, monkeypatch: pytest.MonkeyPatch):
    """The check itself: a group that makes new rollout buffers every iteration (as the
    unrecorded path does) fails the recorded-addresses check."""
    original = trainers.ppo.schedule.Group.load

    def fresh_buffers(self, learners, envs):  # type: ignore[no-untyped-def]
        self.buf = self._buffers()
        return original(self, learners, envs)

    monkeypatch.setattr(trainers.ppo.schedule.Group, "load", fresh_buffers)
    with pytest.raises(AssertionError, match="was not there when it was recorded"):
        trained(population(RuntimeConfig(compile="graphs")))


def test_a_kept_ppo_replays_its_recorded_steps_for_the_next_generations(recording):
    """Kept from one generation to the next (``KeptPPO``), the recorded rollout and gradient step
    of the first generation, and its evaluation's recorded decision, serve the later ones: every
    call reads the storages the first recording read, while selection changes the agents'
    weights, γ, λ, epochs and learning rates. The run equals one that builds a new PPO and a new
    evaluation every generation, bit for bit."""
    data = market(t=100, n=4, k=2)
    space = {"lr": (1e-4, 1e-2), "gamma": (0.9, 0.99), "gae_lambda": (0.8, 0.99), "repeat_times": (1, 3),
             "clip": (0.1, 0.3), "entropy_coef": (0.001, 0.05)}
    evo = EvolutionConfig(population=4, generations=3, iterations_per_generation=2, eval_interval=2, seed=3,
                          quantile=0.5, search_space=space)  # two copies with new hyperparameters a generation
    env = dataclasses.replace(ENV, episode_len=12)

    def run(runner) -> tuple[list[float], list[torch.Tensor], tuple[int, int]]:  # type: ignore[no-untyped-def]
        StandIn.instances.clear()
        evolution = Evolution(data, scales(data, env), env, CFG, evo, (0, 60), (60, 99), 252.0,
                              runtime=RuntimeConfig(compile="graphs"))
        evolution.run(runner=runner)
        steps = [s for s in StandIn.instances if getattr(s.step, "__name__", "") == "_static_step"]
        decisions = [s for s in StandIn.instances if getattr(s.step, "__name__", "") == "_decide"]
        assert all(s.recorded is not None for s in steps + decisions)
        assert sum(s.calls for s in decisions) == evo.generations * 13  # 39 validation bars: 13 decisions of 3
        weights = [v for state in evolution.state.states for v in state["learners"][0]["actor"].values()]
        assert len({r.hparams["lr"] for r in evolution.state.history}) > evo.population  # selection changed them
        return [r.fitness for r in evolution.state.history], weights, (len(steps), len(decisions))

    with KeptPPO() as kept:
        kept_fitness, kept_weights, kept_recorders = run(kept)
    rebuilt_fitness, rebuilt_weights, rebuilt_recorders = run(run_multiplexed)
    assert (kept_recorders, rebuilt_recorders) == ((1, 1), (3, 3))  # recorded once, against once a generation
    assert kept_fitness == rebuilt_fitness
    assert all(torch.equal(a, b) for a, b in zip(kept_weights, rebuilt_weights))


@pytest.mark.slow
def test_compiled_and_eager_steps_give_the_same_generation():
    """``train.compile: inductor`` (torch.compile of the rollout step and the loss) against the
    same static schedule eager: two generations of two agents, weights and fitness. The
    second generation builds a new PPO but compiles nothing: Inductor's kernels are kept
    from one generation to the next (a recompilation per generation would cost minutes at
    the paper's scale, and after torch's cache limit fall back to eager)."""
    data = market(t=100, n=4, k=2)
    evo = EvolutionConfig(population=2, generations=2, iterations_per_generation=3, eval_interval=3, seed=1,
                          search_space={"lr": (1e-4, 1e-3)})
    env = dataclasses.replace(ENV, episode_len=12)
    graphs: list[int] = []  # graphs Dynamo has compiled, after each generation

    def generation(runtime: RuntimeConfig) -> tuple[float, list[torch.Tensor]]:
        run = Evolution(data, scales(data, env), env, CFG, evo, (0, 60), (60, 99), 252.0, runtime=runtime)
        result = run.run(runner=run_multiplexed,
                         on_generation=lambda _: graphs.append(counters["stats"]["unique_graphs"]))
        return result.best_fitness, [s["learners"][0]["actor"][k] for s in run.state.states for k in sorted(
            s["learners"][0]["actor"])]

    eager_fitness, eager = generation(RuntimeConfig(compile="graphs"))  # static, uncompiled (no CUDA graphs on a CPU)
    graphs.clear()
    compiled_fitness, compiled = generation(RuntimeConfig(compile="inductor"))
    assert graphs[0] > 0 and graphs[1] == graphs[0]  # the first generation compiled, the second reused it
    assert compiled_fitness == pytest.approx(eager_fitness, abs=COMPILED_ATOL)
    for a, b in zip(eager, compiled):
        torch.testing.assert_close(a, b, atol=COMPILED_ATOL, rtol=0)
