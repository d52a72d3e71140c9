"""The one PPO (``trainers/ppo/ppo.py``) against hand-computed values, CleanRL's loss on plain
modules with ``torch.optim.Adam``, and the scalar reference MDP."""

import copy
import dataclasses
import math

import pytest
import torch

from tests.trainers.common.reference_env import ReferenceAccount
from tests.trainers.helpers import market, scales
from trainers.common.env import MarketEnv
from trainers.config import EnvConfig, PPOConfig
from trainers.ppo.agent import PPOAgent
from trainers.ppo.loss import normalised
from trainers.ppo.ppo import PPO

ENV = EnvConfig(initial_cash=10_000.0, hmax=10, episode_len=8, min_episode_len=4)
CFG = PPOConfig(num_envs=4, horizon=12, batch_size=16, repeat_times=2, net_dims=(16,))


def population(*seeds: int, cfg: PPOConfig = CFG, envs: tuple[int, ...] = ()) -> PPO:
    """A batched PPO of one fresh agent per seed (``envs``: their env counts)."""
    data = market()
    counts = envs or (cfg.num_envs,) * len(seeds)
    agents = [PPOAgent(data, scales(data, ENV), ENV, dataclasses.replace(cfg, num_envs=n), (0, 39), seed)
              for seed, n in zip(seeds, counts)]
    return PPO([lrn for a in agents for lrn in a.learners], [env for a in agents for env in a.envs], cfg)


def weights(ppo: PPO) -> list[torch.Tensor]:
    ppo.write_back()
    learner = ppo.learners[0]
    return [*learner.actor.state_dict().values(), *learner.critic.state_dict().values()]


@pytest.mark.parametrize("credit", ["joint", "per_stock"])
def test_a_gradient_step_is_cleanrls_loss_with_torch_adam(credit):
    cfg = dataclasses.replace(CFG, credit=credit, entropy_coef=0.05)
    ppo = population(1, cfg=cfg)
    rollout = ppo.collect([0])
    learner = ppo.learners[0]
    actor, critic = copy.deepcopy(learner.actor), copy.deepcopy(learner.critic)
    b_adv = normalised(rollout.advantages, ppo.layout([0]))
    batch = tuple(x.flatten(0, 1) for x in (rollout.obs, rollout.actions, rollout.logprobs, b_adv, rollout.returns))
    mb_inds = torch.randperm(len(batch[0]), generator=torch.Generator().manual_seed(0))[: cfg.batch_size]

    # CleanRL's ppo_continuous_action.py on plain modules
    b_obs, b_actions, b_logprobs, b_advantages, b_returns = (x[mb_inds] for x in batch)
    dist = actor.distribution(b_obs)
    newlogprob = dist.log_prob(b_actions)
    if credit == "joint":
        newlogprob = newlogprob.sum(-1)
    ratio = (newlogprob - b_logprobs).exp()
    pg_loss = torch.max(-b_advantages * ratio, -b_advantages * torch.clamp(ratio, 1 - cfg.clip, 1 + cfg.clip))
    pg_loss = pg_loss.sum(-1).mean() if credit == "per_stock" else pg_loss.mean()
    v_loss = ((critic(b_obs) - b_returns) ** 2).mean()
    loss = pg_loss - cfg.entropy_coef * dist.entropy().sum(-1).mean() + v_loss * cfg.value_coef
    params = [*actor.parameters(), *critic.parameters()]
    optimizer = torch.optim.Adam(params, lr=cfg.lr)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
    optimizer.step()

    ppo.gradient_step([0], [0], [mb_inds], batch, ppo.hparam("clip", group=[0]), ppo.hparam("entropy_coef", group=[0]))
    ppo.write_back()
    for ours, theirs in zip([*learner.actor.parameters(), *learner.critic.parameters()], params):
        assert not torch.equal(ours, torch.zeros_like(ours))
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)
    state = learner.optimizer["state"]
    for k, p in enumerate(params):
        torch.testing.assert_close(state[k]["exp_avg"], optimizer.state[p]["exp_avg"], atol=1e-7, rtol=1e-4)
        torch.testing.assert_close(state[k]["exp_avg_sq"], optimizer.state[p]["exp_avg_sq"], atol=1e-9, rtol=1e-4)


def test_rollout_values_truncated_episodes_from_their_final_state(monkeypatch):
    """At a truncation the env has already reset; the TD target must use the critic's value
    of the finished episode's last state (which the env reports), not of the fresh account."""
    ppo = population(3)
    finals = []
    step = MarketEnv.step

    def spy(self, *args, **kwargs):
        out = step(self, *args, **kwargs)
        finals.append((out.final.index.clone(), out.final.states.clone()))
        return out

    monkeypatch.setattr(MarketEnv, "step", spy)
    rollout = ppo.collect([0])
    critic = ppo.learners[0].critic  # collect leaves the weights as they were
    assert rollout.truncated.any()  # 12 steps of 4..8-bar episodes
    assert rollout.obs.is_contiguous() and rollout.obs.device == ppo.device
    checked = 0
    with torch.no_grad():
        for i, (index, states) in enumerate(finals):
            for e, final in zip(index.tolist(), states):
                value, bootstrap = critic(rollout.obs[i, e]), critic(final)
                expected = rollout.rewards[i, e] + CFG.gamma * bootstrap - value  # GAE stops at a truncation
                torch.testing.assert_close(rollout.advantages[i, e], expected)
                if i + 1 < CFG.horizon:  # the next state is the new episode's, which differs from the final one
                    assert rollout.obs[i + 1, e, 0].item() == pytest.approx(1.0)  # cash / initial cash
                    assert not torch.equal(rollout.obs[i + 1, e], final)
                checked += 1
    assert checked == int(rollout.truncated.sum())


def test_a_populations_rollout_follows_the_reference_mdp_env_by_env(monkeypatch):
    """Two learners of 2 and 3 envs step one stacked env; replayed account by account through
    the scalar reference (``reference_env.py``), each env's rewards, truncations and cash
    are the MDP's for the actions the rollout recorded."""
    ppo = population(1, 2, envs=(2, 3))
    clocks = []  # (t, t_end) of every env before each step
    step = MarketEnv.step

    def spy(self, *args, **kwargs):
        clocks.append((self.t.tolist(), self.t_end.tolist()))
        return step(self, *args, **kwargs)

    monkeypatch.setattr(MarketEnv, "step", spy)
    rollout = ppo.collect([0, 1])
    data = ppo.envs[0].data
    assert rollout.rewards.shape == (CFG.horizon, 5) and rollout.truncated.any()
    for e in range(5):
        acct = ReferenceAccount(data.open.tolist(), data.close.tolist(), ENV.hmax, ENV.cost_pct, ENV.reward_scale,
                                ENV.initial_cash)
        for i, (t, end) in enumerate(clocks):
            if i == 0 or rollout.truncated[i - 1, e]:
                acct.reset(t[e])
            assert rollout.obs[i, e, 0].item() == pytest.approx(acct.cash / ENV.initial_cash, rel=1e-6)
            ref = acct.decide(torch.tanh(rollout.actions[i, e]).tolist(), ENV.decide_every, end[e])
            if ref.near_boundary:
                break  # a last-bit rounding tie: the two may legitimately part ways here
            assert math.isclose(float(rollout.rewards[i, e]), ref.reward, rel_tol=1e-6, abs_tol=1e-9)
            assert bool(rollout.truncated[i, e]) == (acct.t >= end[e])


def test_same_seed_gives_bit_identical_weights_and_training_moves_them():
    def trained(seed: int) -> list[torch.Tensor]:
        ppo = population(seed)
        for _ in range(3):
            ppo.train_iteration([0])
        return weights(ppo)

    a, b, c = trained(1), trained(1), trained(2)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not all(torch.equal(x, z) for x, z in zip(a, c))
    assert not all(torch.equal(x, y) for x, y in zip(weights(population(1)), a))


def test_fusing_averages_the_learners_parameters():
    ppo = population(4, cfg=dataclasses.replace(CFG, learners=3))
    rows = [0, 1, 2]
    rollouts = ppo.train_iteration(rows)
    assert not torch.equal(rollouts[0].actions, rollouts[1].actions)  # their own seeds, their own samples
    before = [p.clone() for p in ppo.nets.params]
    assert not torch.equal(before[1][0], before[1][1])  # their updates differ too
    ppo.fuse(rows)
    for old, new in zip(before, ppo.nets.params):
        for row in rows:
            torch.testing.assert_close(new[row], old.mean(dim=0), rtol=0, atol=1e-7)


def test_the_static_step_path_gives_the_same_rollout():
    """A static env (CUDA's path: it never asks the device which envs truncated, and values
    every env's final state) gives the CPU path's rollout: states, rewards and truncations
    exactly, advantages to rounding."""
    cpu = population(3, 5).collect([0, 1])
    ppo = population(3, 5)
    ppo.static = True
    other = ppo.collect([0, 1])
    assert ppo.group([0, 1]).env.static and cpu.truncated.any()
    for name in ("obs", "actions", "rewards", "truncated"):
        assert torch.equal(getattr(cpu, name), getattr(other, name)), name
    torch.testing.assert_close(cpu.advantages, other.advantages)


STATIC_ATOL = 1e-6
"""The static and grouped schedules sum in other orders (padded widths, the whole batch):
their weights agree to this after several iterations."""


@pytest.mark.parametrize("anchor", [0.0, 4.0])
def test_the_static_and_grouped_updates_agree(anchor: float):
    """Three learners of different widths, env counts and epochs, and a last iteration with one
    of them resting: the whole padded population with masks (static) trains each learner as the
    grouped schedule does, step counts exactly, weights to rounding; with ``ppo.anchor`` too."""
    cfg = dataclasses.replace(CFG, credit="per_stock", policy="shared", net_dims=(16,), anchor=anchor)
    hparams = [{"num_envs": 4, "net_width": 16, "repeat_times": 2}, {"num_envs": 3, "net_width": 8, "repeat_times": 3},
               {"num_envs": 5, "net_width": 12, "repeat_times": 1}]

    def trained(static: bool) -> PPO:
        data = market(t=60)
        env = dataclasses.replace(ENV, action="weights", decide_every=2)
        agents = [PPOAgent(data, scales(data, env), env, cfg.with_hparams(h), (0, 50), seed)
                  for seed, h in zip((1, 2, 3), hparams)]
        ppo = PPO([lrn for a in agents for lrn in a.learners], [e for a in agents for e in a.envs], cfg, static=static)
        for _ in range(3):
            ppo.train_iteration([0, 1, 2])
        ppo.train_iteration([0, 2])
        return ppo

    grouped, static = trained(False), trained(True)
    assert static.group([0, 1, 2]).env.static and not grouped.group([0, 1, 2]).env.static
    assert torch.equal(grouped.adam.step_count, static.adam.step_count)
    assert static.adam.step_count.tolist() == [4 * 3 * 2, 3 * 2 * 3, 4 * 3 * 1]  # iterations × minibatches × epochs
    for a, b in zip(grouped.nets.params, static.nets.params):
        torch.testing.assert_close(a, b, atol=STATIC_ATOL, rtol=0)


def test_the_anchor_holds_the_actor_near_its_start_and_travels_with_its_lineage():
    """``ppo.anchor``: trained alike, the anchored actor's layers end nearer their start than the
    free one's; a copy (the selector's exploit step) and a saved state carry the start along."""
    def distance(strength: float) -> tuple[float, PPOAgent]:
        data = market()
        agent = PPOAgent(data, scales(data, ENV), ENV, dataclasses.replace(CFG, anchor=strength, lr=1e-2), (0, 39), 5)
        start = copy.deepcopy(agent.learners[0].actor)
        ppo = PPO(agent.learners, agent.envs, agent.cfg)
        for _ in range(4):
            ppo.train_iteration([0])
        ppo.write_back()
        pairs = zip(agent.actor.net.parameters(), start.net.parameters())
        moved = [float((p - q).detach().pow(2).sum()) for p, q in pairs]
        return sum(moved) ** 0.5, agent

    free, _ = distance(0.0)
    held, agent = distance(20.0)
    assert 0 < held < 0.5 * free
    learner = agent.learners[0]
    assert learner.anchor is not None and not torch.equal(learner.anchor.net[0].weight, learner.actor.net[0].weight)
    data = market()
    other = PPOAgent(data, scales(data, ENV), ENV, agent.cfg, (0, 39), 9)
    assert not torch.equal(other.learners[0].anchor.net[0].weight, learner.anchor.net[0].weight)
    other.copy_from(agent)
    assert torch.equal(other.learners[0].anchor.net[0].weight, learner.anchor.net[0].weight)
    restored = PPOAgent(data, scales(data, ENV), ENV, agent.cfg, (0, 39), 9)
    restored.load_state_dict(agent.state_dict())
    assert torch.equal(restored.learners[0].anchor.net[0].weight, learner.anchor.net[0].weight)
