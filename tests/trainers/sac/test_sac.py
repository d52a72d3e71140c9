"""Soft Actor-Critic (``trainers/sac/sac.py``): its formulas against numbers worked out by hand,
the replay ring, truncated transitions, and an agent that resumes and copies bit for bit."""

import dataclasses
import io
import math

import pytest
import torch
from torch import nn

import trainers.common.truncation as truncation
from tests.trainers.helpers import market, scales
from trainers.common.env import MarketEnv
from trainers.config import EnvConfig, SACConfig
from trainers.sac.sac import (
    QNetwork,
    ReplayBuffer,
    SACAgent,
    sample_action,
    soft_update,
    squashed_logprob,
    td_target,
    temperature_loss,
)

ENV = EnvConfig(initial_cash=10_000.0, hmax=100, episode_len=8, min_episode_len=4)
CFG = SACConfig(num_envs=4, horizon=8, batch_size=16, buffer_size=64, updates=4, net_dims=(8,), critic_dims=(16,))


def make_agent(seed: int = 0, cfg: SACConfig = CFG, t: int = 40) -> SACAgent:
    data = market(t=t)
    return SACAgent(data, scales(data, ENV), ENV, cfg, (0, t - 1), seed)


def assert_same(a, b, where="state"):
    """Nested dicts, lists, tensors and scalars equal bit for bit."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def constant(q: QNetwork, value: float) -> None:
    """Make ``q`` output ``value`` for every input: every weight and bias 0 but the last bias."""
    with torch.no_grad():
        for p in q.parameters():
            p.zero_()
        q.net[-1].bias.fill_(value)


# --- the formulas ------------------------------------------------------------------------


def test_td_target_by_hand():
    rewards = torch.tensor([1.0, -0.5, 2.0])
    next_q1, next_q2 = torch.tensor([3.0, 1.0, -2.0]), torch.tensor([2.0, 4.0, -1.0])
    next_logprob = torch.tensor([-1.0, 0.5, 2.0])
    # min(Q1', Q2') = [2, 1, -2]; minus 0.2 log π = [2.2, 0.9, -2.4]; times 0.9 plus r
    expected = torch.tensor([1.0 + 0.9 * 2.2, -0.5 + 0.9 * 0.9, 2.0 + 0.9 * -2.4])
    torch.testing.assert_close(td_target(rewards, next_q1, next_q2, next_logprob, 0.2, 0.9), expected)


def test_the_critic_loss_bootstraps_from_the_target_critics():
    """Online critics output 1 and 2, target critics 5 and 3: y must use min(5, 3) = 3, and
    the loss is the mean over both critics and the batch of (Q − y)²."""
    agent = make_agent()
    constant(agent.critics[0], 1.0)
    constant(agent.critics[1], 2.0)
    constant(agent.targets[0], 5.0)
    constant(agent.targets[1], 3.0)
    with torch.no_grad():
        agent.log_alpha.fill_(math.log(0.5))
    g = torch.Generator().manual_seed(7)
    b_obs = torch.rand((3, agent.env.state_dim), generator=g)
    b_next_obs = torch.rand((3, agent.env.state_dim), generator=g)
    b_actions, b_rewards = torch.rand((3, agent.env.action_dim), generator=g) * 2 - 1, torch.tensor([1.0, -0.5, 2.0])

    replay = torch.Generator().set_state(agent.generator.get_state())  # the a' the loss will draw
    with torch.no_grad():
        _, logprob = sample_action(agent.actor, b_next_obs, replay)
    loss = agent.critic_loss(b_obs, b_actions, b_rewards, b_next_obs)

    y = [r + 0.99 * (3.0 - 0.5 * lp) for r, lp in zip([1.0, -0.5, 2.0], logprob.tolist())]
    expected = sum((c - yi) ** 2 for c in (1.0, 2.0) for yi in y) / 6
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert loss.requires_grad  # the online critics learn from it


def test_squashed_logprob_is_the_tanh_change_of_variables():
    mean, std = torch.tensor([[0.1, -0.3], [0.5, 0.0]]), torch.tensor([0.6, 1.5])
    u = torch.tensor([[0.3, -1.2], [2.0, 0.0]])
    squashed = torch.distributions.TransformedDistribution(torch.distributions.Normal(mean, std),
                                                           [torch.distributions.TanhTransform()])
    torch.testing.assert_close(squashed_logprob(mean, std, u), squashed.log_prob(torch.tanh(u)).sum(-1))
    # log(1 − tanh(20)²) in float32 is log(0) = −inf; the stable form is ≈ 2·(log 2 − 20) per action
    far = squashed_logprob(torch.zeros(1, 1), torch.ones(1), torch.full((1, 1), 20.0))
    gaussian = -0.5 * 20.0**2 - 0.5 * math.log(2 * math.pi)
    assert far.item() == pytest.approx(gaussian - 2 * (math.log(2) - 20.0), rel=1e-6)


@pytest.mark.parametrize("logprob, step", [([1.0, 3.0], +1.0), ([-3.0, -1.0], -1.0)])
def test_one_adam_step_moves_log_alpha_by_lr_towards_the_target_entropy(logprob, step):
    """Target entropy −1. Log-probs 1 and 3 are an entropy of −2 (below it): the gradient
    −mean(log π + H̄) = −1 < 0 and α grows. Log-probs −3 and −1 (entropy 2, above): the
    gradient is 3 and α shrinks. Adam's first step is lr·g / (|g| + eps)."""
    log_alpha = torch.tensor(math.log(0.1), requires_grad=True)
    optimizer = torch.optim.Adam([log_alpha], lr=0.01)
    loss = temperature_loss(log_alpha, torch.tensor(logprob, requires_grad=True), -1.0)
    g = -sum(lp - 1.0 for lp in logprob) / 2
    assert loss.item() == pytest.approx(-math.log(0.1) * -g)
    loss.backward()
    assert log_alpha.grad.item() == pytest.approx(g)
    optimizer.step()
    assert log_alpha.item() == pytest.approx(math.log(0.1) + step * 0.01 * abs(g) / (abs(g) + 1e-8), abs=1e-7)


def test_soft_update_moves_the_target_a_quarter_of_the_way():
    target, online = nn.Linear(2, 1), nn.Linear(2, 1)
    with torch.no_grad():
        target.weight.copy_(torch.tensor([[1.0, 2.0]]))
        target.bias.fill_(4.0)
        online.weight.copy_(torch.tensor([[5.0, -2.0]]))
        online.bias.fill_(0.0)
    soft_update(target, online, 0.25)
    # 0.25·online + 0.75·target
    assert target.weight.tolist() == [[2.0, 1.0]] and target.bias.tolist() == [3.0]
    assert online.weight.tolist() == [[5.0, -2.0]] and online.bias.tolist() == [0.0]
    assert target.weight.grad_fn is None


# --- the replay buffer -------------------------------------------------------------------


def add(buffer: ReplayBuffer, values: list[float]) -> None:
    """Rows that carry their value everywhere: obs (v, −v), action v/100, reward v, next obs (v + ½, 0)."""
    v = torch.tensor(values)
    buffer.add(torch.stack((v, -v), 1), (v / 100).unsqueeze(1), v, torch.stack((v + 0.5, 0 * v), 1))


def sampled(buffer: ReplayBuffer, seed: int, n: int = 200) -> torch.Tensor:
    """``n`` draws; every field of a drawn row must belong to the same stored row."""
    b_obs, b_actions, b_rewards, b_next_obs = buffer.sample(n, torch.Generator().manual_seed(seed))
    torch.testing.assert_close(b_obs, torch.stack((b_rewards, -b_rewards), 1))
    torch.testing.assert_close(b_actions[:, 0], b_rewards / 100)
    torch.testing.assert_close(b_next_obs[:, 0], b_rewards + 0.5)
    return b_rewards


def test_the_ring_wraps_round_and_samples_only_its_current_rows():
    buffer = ReplayBuffer(5, 2, 1, torch.device("cpu"))
    add(buffer, [10.0, 11.0, 12.0])
    assert (len(buffer), buffer.pos) == (3, 3)
    assert set(sampled(buffer, 0).tolist()) == {10.0, 11.0, 12.0}  # never an empty slot
    add(buffer, [13.0, 14.0, 15.0, 16.0])  # 13, 14 fill slots 3-4; 15, 16 overwrite slots 0-1
    assert buffer.rewards.tolist() == [15.0, 16.0, 12.0, 13.0, 14.0]
    assert buffer.obs[:, 0].tolist() == [15.0, 16.0, 12.0, 13.0, 14.0]
    assert buffer.next_obs[:, 0].tolist() == [15.5, 16.5, 12.5, 13.5, 14.5]
    assert (len(buffer), buffer.pos) == (5, 2)
    assert set(sampled(buffer, 1).tolist()) == {12.0, 13.0, 14.0, 15.0, 16.0}


def test_a_batch_longer_than_the_ring_keeps_its_last_rows_where_one_by_one_writes_would():
    buffer = ReplayBuffer(5, 2, 1, torch.device("cpu"))
    add(buffer, [1.0])
    add(buffer, [10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0])  # slots 1,2,3,4,0,1,2
    assert buffer.rewards.tolist() == [14.0, 15.0, 16.0, 12.0, 13.0]
    assert (len(buffer), buffer.pos) == (5, 3)


def test_sampling_is_determined_by_the_generator():
    buffer = ReplayBuffer(5, 2, 1, torch.device("cpu"))
    add(buffer, [10.0, 11.0, 12.0, 13.0])
    assert torch.equal(sampled(buffer, 3, 20), sampled(buffer, 3, 20))
    assert not torch.equal(sampled(buffer, 3, 20), sampled(buffer, 4, 20))


# --- the agent ---------------------------------------------------------------------------


def test_a_truncated_transition_ends_at_the_final_state_not_the_reset_state(monkeypatch):
    steps = []
    real_step = MarketEnv.step

    def spy(self, *args, **kwargs):
        out = real_step(self, *args, **kwargs)
        steps.append((out.state.clone(), out.truncated.clone(), out.final.index.clone(), out.final.states.clone()))
        return out

    monkeypatch.setattr(MarketEnv, "step", spy)
    agent = make_agent(seed=5, cfg=dataclasses.replace(CFG, updates=0))
    agent.train_iteration()
    e = CFG.num_envs
    assert len(agent.buffer) == CFG.horizon * e and len(steps) == CFG.horizon
    truncations = 0
    for t, (state, truncated, index, finals) in enumerate(steps):
        final_of = dict(zip(index.tolist(), finals))
        for env in range(e):
            row = t * e + env
            if truncated[env]:
                truncations += 1
                assert torch.equal(agent.buffer.next_obs[row], final_of[env])
                assert not torch.equal(agent.buffer.next_obs[row], state[env])  # the new episode's first state
                assert state[env, 0].item() == pytest.approx(1.0)  # fresh account: cash / initial cash
            else:
                assert torch.equal(agent.buffer.next_obs[row], state[env])
            if t + 1 < CFG.horizon:  # the next transition starts from the state the env reported
                assert torch.equal(agent.buffer.obs[row + e], state[env])
    assert truncations >= e  # 8 steps of 4..8-bar episodes: every env truncates at least once


def test_two_agents_with_one_seed_train_bit_for_bit_alike():
    a, b, other = make_agent(seed=3), make_agent(seed=3), make_agent(seed=4)
    for agent in (a, b, other):
        for _ in range(2):
            agent.train_iteration()
    assert_same(a.state_dict(), b.state_dict())
    assert not torch.equal(a.actor.net[0].weight, other.actor.net[0].weight)


def test_a_resumed_agent_continues_bit_for_bit():
    """Train 2 iterations (the buffer is full), save, train one more (it wraps): a fresh agent
    of another seed loaded from the saved state follows exactly, from a checkpoint file as
    the run writes one, or from the state dict kept in memory (a copy, not a view)."""
    a = make_agent(seed=1)
    a.train_iteration()
    a.train_iteration()
    kept, saved = a.state_dict(), io.BytesIO()
    torch.save(kept, saved)
    a.train_iteration()
    saved.seek(0)
    loaded = torch.load(saved, weights_only=True)
    assert_same(kept, loaded)  # training on left the kept state as it was
    for state in (loaded, kept):
        b = make_agent(seed=2)
        b.load_state_dict(state)
        b.train_iteration()
        assert_same(a.state_dict(), b.state_dict())
    assert a.buffer.pos == 96 % CFG.buffer_size and len(a.buffer) == CFG.buffer_size


def test_copy_from_takes_the_weights_and_buffer_but_keeps_its_own_streams_and_envs():
    parent, child = make_agent(seed=1), make_agent(seed=2, cfg=dataclasses.replace(CFG, lr=1e-2))
    parent.train_iteration()
    parent.train_iteration()
    before = parent.state_dict()
    own_rng, own_env = child.generator.get_state(), child.env.state_dict()
    child.copy_from(parent)
    mine = child.state_dict()
    for key in ("actor", "critics", "targets", "actor_optimizer", "critic_optimizer", "alpha_optimizer", "log_alpha",
                "buffer", "hparams"):
        assert_same(mine[key], before[key], key)
    assert torch.equal(mine["rng"], own_rng) and not torch.equal(mine["rng"], before["rng"])
    assert_same(mine["env"], own_env)
    assert child.obs is None and child.actor_optimizer.param_groups[0]["lr"] == CFG.lr
    child.train_iteration()  # the copy learns on its own: nothing of the parent's moves
    assert_same(parent.state_dict(), before)
    assert not torch.equal(child.buffer.obs, parent.buffer.obs)


def test_set_hparams_reaches_the_optimizers():
    agent = make_agent()
    agent.set_hparams({"lr": 0.02, "tau": 0.1, "updates": 7})
    assert (agent.cfg.lr, agent.cfg.tau, agent.cfg.updates) == (0.02, 0.1, 7)
    for optimizer in (agent.actor_optimizer, agent.critic_optimizer, agent.alpha_optimizer):
        assert optimizer.param_groups[0]["lr"] == 0.02
    assert agent.samples_per_iteration == CFG.num_envs * CFG.horizon


@pytest.mark.parametrize("policy", ["mlp", "shared"])
def test_a_few_iterations_learn_something_finite(policy):
    agent = make_agent(seed=0, t=60, cfg=dataclasses.replace(CFG, policy=policy))
    start = agent.state_dict()
    logs = [agent.train_iteration() for _ in range(3)]
    for log in logs:
        assert log.keys() == {"critic_loss", "actor_loss", "alpha", "reward"}
        assert all(math.isfinite(v) for v in log.values())
    assert logs[-1]["alpha"] != CFG.init_alpha
    for name in ("actor", "critics", "targets"):
        for key, value in agent.state_dict()[name].items():
            assert not torch.equal(value, start[name][key]), f"{name}.{key} did not move"
    for key, value in agent.targets.state_dict().items():  # the targets trail the critics
        assert not torch.equal(value, agent.critics.state_dict()[key])


def test_a_static_env_fills_the_same_buffer_and_an_overflow_is_caught(monkeypatch):
    """The static step's padded final states (trainers/common/truncation.py) give the same
    transitions; past its capacity, the iteration fails where it reads its losses back."""
    cfg = dataclasses.replace(CFG, num_envs=16, buffer_size=128)
    cpu, static = make_agent(seed=5, cfg=cfg), make_agent(seed=5, cfg=cfg)
    static.env.static = True
    cpu.train_iteration(), static.train_iteration()
    assert torch.equal(cpu.buffer.next_obs, static.buffer.next_obs)
    monkeypatch.setattr(truncation, "capacity", lambda env_cfg, bars, num_envs: 1)
    tight = make_agent(seed=5, cfg=cfg)
    tight.env.static = True
    with pytest.raises(RuntimeError, match=r"more envs than a part's capacity \[1\]"):
        tight.train_iteration()
