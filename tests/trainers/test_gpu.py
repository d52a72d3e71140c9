"""CUDA against the CPU (docs/training.md, GPU workers). Marked ``gpu`` and skipped without
CUDA: on a GPU machine, ``python3 -m pytest -m gpu --noconftest tests/trainers/test_gpu.py
tests/trainers/common/test_env_reference.py``
(benchmarks/perf/gpu.py's ``parity`` section records the same checks' numbers)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trainers.common.env import MarketData
from trainers.config import EnvConfig, PPOConfig, RuntimeConfig
from trainers.population.config import EvolutionConfig
from trainers.population.evolution import Evolution, EvolutionResult
from trainers.ppo.multiplex import run_multiplexed

from .helpers import market, scales

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

ENV = EnvConfig(initial_cash=10_000.0, hmax=10, episode_len=12, min_episode_len=4, action="weights", decide_every=2)
PPO = PPOConfig(num_envs=4, horizon=8, batch_size=16, repeat_times=2, net_dims=(8,), policy="shared",
                credit="per_stock")
EVO = EvolutionConfig(population=3, generations=2, iterations_per_generation=2, eval_interval=2, seed=5,
                      search_space={"lr": (1e-4, 1e-3), "net_width": (6, 10)})
WEIGHTS_ATOL = 1e-4
"""CUDA and the CPU sum in other orders: after a generation's updates the weights agree to
this, fitness to FITNESS_ATOL, and the same agent is selected."""
FITNESS_ATOL = 1e-4


def evolution(data: MarketData, runtime: RuntimeConfig = RuntimeConfig()) -> Evolution:
    return Evolution(data, scales(data, ENV), ENV, PPO, EVO, (0, 60), (60, 99), 252.0, runtime=runtime)


def test_one_generation_on_cuda_matches_the_cpu():
    """Random streams on the CPU (``train.rng: cpu``), so CUDA draws the CPU's numbers; the
    CUDA run takes the static update and recorded steps, the CPU the grouped update."""
    data = market(t=100, n=5, k=2)
    cpu = evolution(data).run(runner=run_multiplexed)
    cuda = evolution(data.to("cuda"), RuntimeConfig(compile="graphs", rng="cpu")).run(runner=run_multiplexed)
    assert (cpu.best_agent, cpu.best_generation) == (cuda.best_agent, cuda.best_generation)
    for a, b in zip(cpu.history, cuda.history):
        assert a.fitness == pytest.approx(b.fitness, abs=FITNESS_ATOL)
    for name, weight in cpu.best_actor.items():
        torch.testing.assert_close(cuda.best_actor[name].cpu(), weight, atol=WEIGHTS_ATOL, rtol=0)


def stop(_: EvolutionResult) -> None:
    raise StopIteration


@pytest.mark.parametrize(("saved_on", "resumed_on"), [("cuda", "cpu"), ("cpu", "cuda")])
def test_a_checkpoint_resumes_on_the_other_device(tmp_path: Path, saved_on: str, resumed_on: str):
    """The checkpoint loads wherever it is resumed (map_location), the weights and accounts
    continue, and a random stream that cannot continue on the other kind of generator
    restarts from its seed with a warning."""
    data = market(t=100, n=5, k=2)
    first = evolution(data.to(saved_on))
    with pytest.raises(StopIteration):
        first.run(checkpoint_dir=tmp_path, on_generation=stop, runner=run_multiplexed)
    second = evolution(data.to(resumed_on))
    second.load(tmp_path / Evolution.CHECKPOINT)
    assert second.state.generation == 1
    saved = first.state.states[0]["learners"][0]["actor"]
    for name, weight in second.state.states[0]["learners"][0]["actor"].items():
        assert torch.equal(weight.cpu(), saved[name].cpu())
    with pytest.warns(UserWarning, match="restarts from its seed"):
        result = second.run(runner=run_multiplexed)
    assert second.state.generation == EVO.generations and result.env_steps > 0
