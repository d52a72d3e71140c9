"""The update's Triton kernel (trainers/ppo/kernel.py) against autograd on the loss it replaces,
run here by Triton's interpreter on the CPU (docs/training.md, the update's bytes)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tests.trainers.helpers import market, scales
from trainers.common.nets import ActorShape, Critic, new_actor
from trainers.common.state import StateScales
from trainers.config import EnvConfig, PPOConfig, RuntimeConfig
from trainers.ppo import kernel
from trainers.ppo.agent import PPOAgent
from trainers.ppo.batched import BatchedNets
from trainers.ppo.loss import ppo_loss
from trainers.ppo.ppo import PPO

pytestmark = pytest.mark.skipif(not kernel.runs_on(torch.device("cpu")),
                                reason="Triton's interpreter is not available")

STOCKS, FEATURES, AGENTS, ROWS, WIDTH = 7, 3, 3, 90, 40


def _population(widths: tuple[int, ...] = (5, 8, 8)) -> BatchedNets:
    """Agents of different hidden widths (the model padded to the widest), each a per-stock scorer."""
    torch.manual_seed(0)
    shape = ActorShape.of(STOCKS, FEATURES, StateScales(1e-6, 1e-2, (0.7, 1.1, 0.9, 1.3, 0.8, 1.0, 1.2)), "shared")
    actors = [new_actor(shape, [w], -1.0) for w in widths]
    return BatchedNets.stack(actors, [Critic(shape.state_dim, (w,)) for w in widths])


def _batch(nets: BatchedNets, per_action: bool) -> tuple[tuple[torch.Tensor, ...], torch.Tensor, torch.Tensor]:
    """A flat batch whose old log-probabilities lie around the current policy's, so that the
    ratios fall inside and outside the clip range; and minibatches, one learner's half weighted out."""
    g = torch.Generator().manual_seed(1)
    obs = torch.randn(ROWS, 1 + STOCKS * (2 + FEATURES), generator=g)
    obs[:, : 1 + 2 * STOCKS] = obs[:, : 1 + 2 * STOCKS].abs() * 1e2  # cash, shares and prices are positive
    actions = torch.randn(ROWS, STOCKS, generator=g) * 0.3
    with torch.no_grad():
        now = nets.log_prob(nets.mean(obs.expand(AGENTS, -1, -1)), actions.expand(AGENTS, -1, -1), per_action)[0]
    old = now + 0.3 * torch.randn(now.shape, generator=g)
    advantages = torch.randn(old.shape, generator=g)
    idx = torch.randint(0, ROWS, (AGENTS, WIDTH), generator=g)
    weight = torch.full((AGENTS, WIDTH), 1.0 / WIDTH)
    weight[1, WIDTH // 2 :] = 0.0
    return (obs, actions, old, advantages, torch.randn(ROWS, generator=g)), idx, weight


def _loss_and_grads(loss_fn, nets: BatchedNets, batch, idx, weight) -> tuple[torch.Tensor, list[torch.Tensor]]:
    sub = nets.sub(list(range(AGENTS)), grad=True)
    loss = loss_fn(sub, batch, idx, weight, torch.tensor([0.2, 0.1, 0.3]), torch.tensor([0.01, 0.0, 0.02]), 0.5)
    return loss.detach(), list(torch.autograd.grad(loss, sub.params))


@pytest.mark.parametrize(("blocks", "shape"), [(kernel.BLOCKS, (16, 4, 64)), (1, (16, 4, 64)), (1, (32, 4, 32))],
                         ids=["one program", "two programs", "blocks of 32"])
def test_the_kernel_gives_autograds_loss_and_gradients(blocks: int, shape: tuple[int, int, int],
                                                       monkeypatch: pytest.MonkeyPatch):
    """Three agents of widths 5, 8 and 8, padded, one with half its rows weighted out, ratios on
    both sides of each agent's clip range, 7 stocks in chunks of 4, minibatches of 40 in blocks
    of 16, walked by one program or by two (each summing its blocks), or in blocks of 32 with the
    state's 36 entries read 32 at a time (the second of :data:`kernel.SHAPES`, 4 of 7 stocks at a
    time here): the kernel's loss and every parameter's gradient (the scorer's, ``log_std``'s and
    the critic's) are autograd's within float rounding, and the padded units' gradients are
    exactly zero."""
    monkeypatch.setattr(kernel, "BLOCKS", blocks)
    monkeypatch.setattr(kernel, "LAUNCH", kernel.Launch(4, "ieee", 3, *shape))
    assert kernel._programs(WIDTH, shape[0]) == (2 if (blocks, shape[0]) == (1, 16) else 1)
    nets = _population()
    batch, idx, weight = _batch(nets, per_action=True)
    ratio = (nets.log_prob(nets.mean(batch[0][idx]), batch[1][idx], per_action=True) - batch[2][idx]).exp()
    assert bool(((ratio - 1).abs() < 0.1).any()) and bool(((ratio - 1).abs() > 0.3).any())
    launched, constants = [], kernel.constants
    monkeypatch.setattr(kernel, "constants", lambda *a: launched.append(constants(*a)) or launched[-1])
    expected, expected_grads = _loss_and_grads(ppo_loss, nets, batch, idx, weight)
    got, grads = _loss_and_grads(kernel.kernel_loss(torch.device("cpu")), nets, batch, idx, weight)
    assert [(c["BM"], c["SC"], c["CK"]) for c in launched] == [shape]  # one launch, in the shape asked for
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=0)
    for want, have in zip(expected_grads, grads):
        torch.testing.assert_close(have, want, rtol=0, atol=1e-5 * float(want.abs().max()))
    w1, b1 = grads[1], grads[2]
    assert float(w1[0, :, 5:].abs().max()) == 0.0 and float(b1[0, :, 5:].abs().max()) == 0.0


@pytest.mark.parametrize("case", ["two hidden layers", "joint credit"])
def test_a_loss_the_kernel_does_not_cover_falls_back_to_autograd(case: str, monkeypatch: pytest.MonkeyPatch):
    """A per-stock scorer of two hidden layers, or one advantage for the whole action, is not the
    kernel's: the loss is the fallback's, bit for bit."""
    torch.manual_seed(0)
    shape = ActorShape.of(STOCKS, FEATURES, StateScales(1e-6, 1e-2, (1.0,) * STOCKS), "shared")
    dims = [8, 8] if case == "two hidden layers" else [8]
    nets = BatchedNets.stack([new_actor(shape, dims) for _ in range(AGENTS)],
                             [Critic(shape.state_dim, tuple(dims)) for _ in range(AGENTS)])
    batch, idx, weight = _batch(nets, per_action=case != "joint credit")
    assert kernel.fits(_population(), _batch(_population(), per_action=True)[0]) and not kernel.fits(nets, batch)
    monkeypatch.setattr(kernel, "_run", lambda *a: pytest.fail("the kernel ran on a loss it does not cover"))
    expected, _ = _loss_and_grads(ppo_loss, nets, batch, idx, weight)
    got, _ = _loss_and_grads(kernel.kernel_loss(torch.device("cpu")), nets, batch, idx, weight)
    assert torch.equal(got, expected)


def test_a_population_trained_with_the_kernel_trains_as_with_autograd(monkeypatch: pytest.MonkeyPatch):
    """``train.compile: kernel``: an iteration of three learners of different widths, per-stock
    credit, end with the weights of the static update on autograd, to float rounding. (Inductor
    is left out, the rollout run as written: its compile would take most of the test's time, and
    tests/trainers/common/test_capture.py checks it.)"""
    monkeypatch.setattr("trainers.ppo.ppo.compiled", lambda fn, mode: fn)
    env = EnvConfig(initial_cash=10_000.0, hmax=10, episode_len=8, min_episode_len=4, action="weights",
                    decide_every=2, reward="excess")
    cfg = PPOConfig(num_envs=4, horizon=6, batch_size=12, repeat_times=2, net_dims=(8,), policy="shared",
                    credit="per_stock")

    def trained(compile: str) -> PPO:
        data = market(t=60)
        agents = [PPOAgent(data, scales(data, env), env, dataclasses.replace(cfg, net_dims=(w,)), (0, 50), seed)
                  for seed, w in zip((1, 2, 3), (8, 5, 8))]
        ppo = PPO([lrn for a in agents for lrn in a.learners], [e for a in agents for e in a.envs], cfg,
                  RuntimeConfig(compile=compile), static=True)
        ppo.train_iteration([0, 1, 2])  # two epochs of two minibatches: four Adam steps
        return ppo

    launched, run = [], kernel._run
    monkeypatch.setattr(kernel, "_run", lambda *a: launched.append(1) or run(*a))
    with_kernel, with_autograd = trained("kernel"), trained("graphs")
    assert len(launched) == 4
    assert torch.equal(with_kernel.adam.step_count, with_autograd.adam.step_count)
    for a, b in zip(with_kernel.nets.params, with_autograd.nets.params):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


COMPILE = """
import json

import triton

from benchmarks.perf.gpu_kernel import build_stats
from trainers.ppo import kernel

print(json.dumps(build_stats([kernel.LAUNCH, kernel.LAUNCHES[-1]])))
"""


def test_the_kernel_compiles_for_an_h100_at_the_headlines_shapes():
    """Triton's interpreter accepts code the compiler does not (it missed a local offset that was
    not a constexpr): the real compiler builds the kernel for an H100 (sm_90) down to its cubin,
    at the paper's 100 stocks, with no GPU here, in a process where the interpreter is off: the
    shipped build, and the device script's other lowering (the other shape of work, no software
    pipeline, its ``tf32x3`` matmuls on the tensor cores, where ``ieee`` ones are not). Their loops
    are the four a block that benchmarks/perf/gpu_kernel.py counts the instructions of."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", COMPILE], cwd=Path(__file__).parents[3], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    shipped, other = json.loads(done.stdout.splitlines()[-1])
    assert (shipped["block"], shipped["tensor_core"], other["block"], other["tensor_core"]) == (16, False, 32, True)
    assert all(0 < r["registers"] <= 255 and r["per_sample"] > 1000 for r in (shipped, other))


def test_the_kernels_bytes_by_hand():
    """3 agents × 40 samples of a 36-long state and 7 stocks: each sample's index (8 bytes),
    weight (4) and row of state, actions, old log-probabilities, advantages (7 each) and value
    target, float32; the 1,107 weights, the 7 reference prices and 3 clip ranges once; and one
    program's partial gradients per agent (369 numbers and the 2 loss sums), read and written."""
    nets = _population()
    batch, idx, _ = _batch(nets, per_action=True)
    assert sum(p.numel() for p in nets.params) == 1107 and kernel._programs(WIDTH, kernel.LAUNCH.block) == 1
    per_sample = 8 + 4 + 4 * (36 + 7 + 7 + 7 + 1)
    assert kernel.bytes_accessed(nets, batch, idx) == 3 * 40 * per_sample + 4 * (1107 + 7 + 3) + 2 * 4 * 3 * (369 + 2)
