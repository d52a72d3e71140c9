import json
import math

import pydantic
import pytest
import torch

from tests.trainers.helpers import market, scales
from trainers.common.nets import Actor
from trainers.config import EnvConfig, NitroConfig, PPOConfig
from trainers.ppo.agent import PPOAgent
from trainers.ppo.nitro import (
    BoostScore,
    actor_convexity,
    convexity_ratio,
    lanczos_extremes,
    next_env_count,
    surrogate,
    surrogate_hvp,
)
from trainers.ppo.ppo import PPO

ENV = EnvConfig(initial_cash=10_000.0, hmax=10, episode_len=8, min_episode_len=4)
CFG = PPOConfig(num_envs=4, horizon=12, batch_size=16, repeat_times=2, net_dims=(8,))  # 142 actor parameters


def symmetric(b: int, p: int, seed: int) -> torch.Tensor:
    a = torch.randn(b, p, p, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return (a + a.transpose(1, 2)) / 2


def operator(h: torch.Tensor):
    return lambda v: torch.einsum("bij,bj->bi", h, v)


def start(b: int, p: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(b, p, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.fixture(scope="module")
def rollout_agent():
    data = market()
    agent = PPOAgent(data, scales(data, ENV), ENV, CFG, (0, 39), 5)
    return agent.actor, PPO(agent.learners, agent.envs, CFG).collect([0])


def test_config_validates_and_is_a_strict_pydantic_section():
    NitroConfig(decay=1.0, min_envs=4, max_envs=4, lanczos_steps=2, subset=1)
    for bad in ({"window": 0}, {"decay": 0.0}, {"decay": 1.5}, {"min_envs": 0}, {"min_envs": 9, "max_envs": 8},
                {"lanczos_steps": 1}, {"subset": 0}, {"eps": 0.0}):
        with pytest.raises(ValueError):
            NitroConfig(**bad)
    adapter = pydantic.TypeAdapter(NitroConfig)
    assert adapter.validate_python({"window": 3}).window == 3
    with pytest.raises(pydantic.ValidationError):
        adapter.validate_python({"windw": 3})


def test_lanczos_with_full_steps_recovers_the_extreme_eigenvalues():
    h = symmetric(3, 40, seed=0)
    eig = torch.linalg.eigvalsh(h)
    lam_min, lam_max = lanczos_extremes(operator(h), start(3, 40), steps=40)
    assert lam_min.dtype == lam_max.dtype == torch.float64
    torch.testing.assert_close(lam_min, eig[:, 0], rtol=0, atol=1e-6)
    torch.testing.assert_close(lam_max, eig[:, -1], rtol=0, atol=1e-6)


def test_lanczos_with_few_steps_finds_well_separated_extremes():
    p = 200
    q, _ = torch.linalg.qr(torch.randn(p, p, generator=torch.Generator().manual_seed(2), dtype=torch.float64))
    eig = torch.cat([torch.tensor([-5.0, 6.0], dtype=torch.float64), torch.linspace(-1, 1, p - 2).double()])
    h = (q * eig) @ q.T
    lam_min, lam_max = lanczos_extremes(operator(h[None]), start(1, p), steps=15)
    assert abs(lam_min.item() + 5) < 1e-3 and abs(lam_max.item() - 6) < 1e-3


def test_lanczos_rows_are_independent():
    h, v0 = symmetric(4, 30, seed=3), start(4, 30)
    perm = torch.tensor([2, 0, 3, 1])
    lo, hi = lanczos_extremes(operator(h), v0, steps=8)
    lo_p, hi_p = lanczos_extremes(operator(h[perm]), v0[perm], steps=8)
    torch.testing.assert_close(lo_p, lo[perm], rtol=0, atol=1e-12)
    torch.testing.assert_close(hi_p, hi[perm], rtol=0, atol=1e-12)
    assert not torch.allclose(lo, lo[perm])


def test_lanczos_breakdown_is_finite_and_keeps_each_rows_extremes():
    p = 30
    u = start(1, p, seed=4)[0]
    low_rank = 2 * torch.eye(p, dtype=torch.float64) + torch.outer(u, u)  # Krylov space of dimension 2
    rank_one = torch.outer(u, u)
    h = torch.stack([low_rank, rank_one, symmetric(1, p, seed=5)[0]])
    lam_min, lam_max = lanczos_extremes(operator(h), start(3, p), steps=12)
    assert torch.isfinite(lam_min).all() and torch.isfinite(lam_max).all()
    norm2 = u.dot(u).item()
    torch.testing.assert_close(lam_min[:2], torch.tensor([2.0, 0.0], dtype=torch.float64), rtol=0, atol=1e-9)
    torch.testing.assert_close(lam_max[:2], torch.tensor([2 + norm2, norm2], dtype=torch.float64), rtol=1e-9, atol=0)
    eig = torch.linalg.eigvalsh(h[2])
    assert eig[0] - 1e-9 <= lam_min[2] < eig[0] / 2 and eig[-1] / 2 < lam_max[2] <= eig[-1] + 1e-9


def test_lanczos_small_operators_zero_rows_and_float32():
    h = symmetric(2, 3, seed=6)
    lam_min, lam_max = lanczos_extremes(operator(h), start(2, 3), steps=12)  # steps clipped to P = 3
    eig = torch.linalg.eigvalsh(h)
    torch.testing.assert_close(lam_min, eig[:, 0], rtol=0, atol=1e-9)
    torch.testing.assert_close(lam_max, eig[:, -1], rtol=0, atol=1e-9)
    zero = lanczos_extremes(operator(h), torch.zeros(2, 3, dtype=torch.float64), steps=3)
    assert all(torch.equal(x, torch.zeros(2, dtype=torch.float64)) for x in zero)

    def hvp32(v: torch.Tensor) -> torch.Tensor:
        assert v.dtype == torch.float32  # hvp sees v0's dtype
        return torch.einsum("bij,bj->bi", h.float(), v)

    lo32, hi32 = lanczos_extremes(hvp32, start(2, 3).float(), steps=3)
    torch.testing.assert_close(lo32, eig[:, 0], rtol=0, atol=1e-5)
    torch.testing.assert_close(hi32, eig[:, -1], rtol=0, atol=1e-5)


def tiny_problem(n: int = 24, seed: int = 7):
    g = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        actor = Actor(3, 2, (4,), -0.5).double()
    states = torch.randn(n, 3, generator=g, dtype=torch.float64)
    raw = torch.randn(n, 2, generator=g, dtype=torch.float64)
    with torch.no_grad():
        # Old log-probs off the current policy, so that some ratios fall outside the clip range.
        old = actor.distribution(states).log_prob(raw).sum(-1) + 0.3 * torch.randn(n, generator=g, dtype=torch.float64)
    adv = torch.randn(n, generator=g, dtype=torch.float64)
    return actor, (states, raw, old, adv)


def test_surrogate_hvp_matches_the_explicit_hessian():
    actor, batch = tiny_problem()
    names = [name for name, _ in actor.named_parameters()]
    shapes = [p.shape for p in actor.parameters()]
    theta = torch.cat([p.detach().reshape(-1) for p in actor.parameters()])

    def objective(flat: torch.Tensor) -> torch.Tensor:
        chunks = torch.split(flat, [math.prod(s) for s in shapes])
        params = {n: c.reshape(s) for n, c, s in zip(names, chunks, shapes)}
        return -torch.func.functional_call(Objective(actor), {f"actor.{n}": v for n, v in params.items()}, batch)

    hessian = torch.autograd.functional.hessian(objective, theta)
    assert hessian.abs().max() > 1e-3
    v = torch.randn(1, theta.numel(), generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    hvp = surrogate_hvp(actor, *batch, clip=0.2)
    expected = (hessian @ v[0])[None]
    torch.testing.assert_close(hvp(v), expected, rtol=1e-5, atol=1e-8)
    torch.testing.assert_close(hvp(2 * v), 2 * expected, rtol=1e-5, atol=1e-8)  # the graph is reused
    assert all(p.grad is None for p in actor.parameters())


class Objective(torch.nn.Module):
    """PPO's clipped loss as a module, so that ``functional_call`` can swap the actor's parameters."""

    def __init__(self, actor: Actor):
        super().__init__()
        self.actor = actor

    def forward(self, states, raw, old, adv) -> torch.Tensor:
        return surrogate(self.actor, states, raw, old, adv, 0.2)[0]


def test_convexity_ratio_values_and_guard():
    r = convexity_ratio(torch.tensor([2.0, 3.0, -1.0]), torch.tensor([-4.0, -1.0, -2.0]))
    torch.testing.assert_close(r, torch.tensor([0.5, 3.0, -0.5], dtype=torch.float64))
    guarded = convexity_ratio(torch.tensor([2.0, 2.0, 0.0, 3.0]), torch.tensor([0.0, 1.0, 0.0, -1e-9]), eps=1e-3)
    torch.testing.assert_close(guarded, torch.tensor([1e3, 1e3, 0.0, 1e3], dtype=torch.float64))
    tiny = convexity_ratio(torch.tensor([1e-300, -1e-300], dtype=torch.float64),
                           torch.tensor([0.0, -2e-300], dtype=torch.float64), eps=1e-20)
    assert torch.isfinite(tiny).all() and tiny[0] > 0 and tiny[1] == -0.5


def test_actor_convexity_is_deterministic_and_leaves_the_actor_alone(rollout_agent):
    actor, rollout = rollout_agent
    before = [p.detach().clone() for p in actor.parameters()]
    cfg = NitroConfig(subset=32, lanczos_steps=6)
    r1 = actor_convexity(actor, rollout, cfg, 0.25, torch.Generator().manual_seed(0))
    with torch.no_grad():
        r2 = actor_convexity(actor, rollout, cfg, 0.25, torch.Generator().manual_seed(0))
    r3 = actor_convexity(actor, rollout, cfg, 0.25, torch.Generator().manual_seed(1))
    assert math.isfinite(r1) and r1 == r2 and r3 != r1
    assert all(torch.equal(a, b) for a, b in zip(before, actor.parameters()))
    assert all(p.grad is None for p in actor.parameters())


def test_actor_convexity_on_the_whole_rollout_matches_the_full_spectrum(rollout_agent):
    actor, rollout = rollout_agent
    params = list(actor.parameters())
    size = sum(p.numel() for p in params)
    r = actor_convexity(actor, rollout, NitroConfig(subset=10**6, lanczos_steps=size), 0.25,
                        torch.Generator().manual_seed(0))
    adv = rollout.advantages.flatten()
    loss, _ = surrogate(actor, rollout.obs.flatten(0, 1), rollout.actions.flatten(0, 1),
                        rollout.logprobs.flatten(), (adv - adv.mean()) / (adv.std() + 1e-8), 0.25)
    grad = torch.cat([g.reshape(-1) for g in torch.autograd.grad(-loss, params, create_graph=True)])
    rows = [torch.autograd.grad(grad, params, e, retain_graph=True) for e in torch.eye(size)]
    hessian = torch.stack([torch.cat([h.reshape(-1) for h in row]) for row in rows]).double()
    eig = torch.linalg.eigvalsh((hessian + hessian.T) / 2)
    assert eig[0] < 0 < eig[-1]
    assert r == pytest.approx(float(convexity_ratio(eig[-1], eig[0])), rel=1e-3)


def test_boost_score_first_round_is_neutral_and_extremes_score_d_to_the_k():
    score = BoostScore(window=6, decay=0.9)
    assert score.update(3.0) == 0.5
    assert score.update(1.0) == pytest.approx(0.9)  # lowest in the window: 1 · d^1
    assert score.update(5.0) == 0.0  # highest
    assert score.update(0.0) == pytest.approx(0.9**3)
    assert score.update(2.5) == pytest.approx(0.5 * 0.9**4)  # (5 - 2.5) / (5 - 0)
    assert score.update(2.5) == pytest.approx(0.5 * 0.9**5)
    assert score.rounds == 6 and score.state()["history"] == [3.0, 1.0, 5.0, 0.0, 2.5, 2.5]
    with pytest.raises(ValueError):
        score.update(float("nan"))


def test_boost_score_window_forgets_old_rounds():
    score = BoostScore(window=2, decay=1.0)
    score.update(10.0)
    assert score.update(0.0) == 1.0
    assert score.update(5.0) == 0.0  # the window is (0, 5): 10 has left it
    assert score.update(5.0) == 0.5  # (5, 5): flat, and 0 has left it
    assert score.state()["history"] == [5.0, 5.0]


def test_boost_score_state_round_trip_continues_identically():
    a = BoostScore(window=3, decay=0.95)
    for r in (1.0, 4.0, 2.0, 7.0):
        a.update(r)
    b = BoostScore.from_state(json.loads(json.dumps(a.state())))
    assert b.state() == a.state()
    assert [a.update(r) for r in (3.0, 0.5, 9.0, 9.0)] == [b.update(r) for r in (3.0, 0.5, 9.0, 9.0)]
    with pytest.raises(ValueError):
        BoostScore.from_state({**a.state(), "history": [1.0, 2.0, 3.0, 4.0]})


def test_next_env_count_rounds_and_clips():
    cfg = NitroConfig(min_envs=2, max_envs=10)
    assert [next_env_count(s, cfg) for s in (0.0, 0.01, 0.34, 0.36, 0.25, 1.0)] == [2, 2, 3, 4, 3, 10]
    assert next_env_count(0.5, NitroConfig()) == 32
    assert next_env_count(0.05, NitroConfig()) == 8
    with pytest.raises(ValueError):
        next_env_count(float("nan"), cfg)
