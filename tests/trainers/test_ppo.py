import dataclasses

import pytest
import torch

from trainers.agent import PPOAgent
from trainers.env import EnvConfig
from trainers.ppo import PPOConfig, gae_advantages

from .helpers import market, scales

ENV = EnvConfig(initial_cash=10_000.0, hmax=10, episode_len=8, min_episode_len=4)
PPO = PPOConfig(num_envs=4, horizon=12, batch_size=16, repeat_times=2, net_dims=(16,))


def make_agent(seed: int, cfg: PPOConfig = PPO) -> PPOAgent:
    data = market()
    return PPOAgent(data, scales(data, ENV), ENV, cfg, (0, 39), seed)


def trained(seed: int, iterations: int = 3, cfg: PPOConfig = PPO) -> PPOAgent:
    agent = make_agent(seed, cfg)
    for _ in range(iterations):
        stats = agent.train_iteration()
    assert all(torch.isfinite(torch.tensor(v)) for v in stats.values())
    return agent


def weights(agent: PPOAgent) -> list[torch.Tensor]:
    return [*agent.actor.state_dict().values(), *agent.learners[0].critic.state_dict().values()]


def test_same_seed_gives_bit_identical_weights():
    a, b, c = trained(1), trained(1), trained(2)
    assert all(torch.equal(x, y) for x, y in zip(weights(a), weights(b)))
    assert not all(torch.equal(x, z) for x, z in zip(weights(a), weights(c)))


def test_training_changes_the_policy():
    fresh, agent = make_agent(1), trained(1)
    assert not all(torch.equal(x, y) for x, y in zip(weights(fresh), weights(agent)))


def test_gae_bootstraps_at_truncation_and_cuts_the_recursion():
    gamma, lam = 0.9, 0.5
    rewards = torch.tensor([[1.0], [2.0], [3.0]])
    values = torch.tensor([[0.5], [1.0], [1.5]])
    truncated = torch.tensor([[False], [True], [False]])
    final_values = torch.tensor([[0.0], [4.0], [0.0]])
    next_value = torch.tensor([2.0])
    adv = gae_advantages(rewards, values, next_value, truncated, final_values, gamma, lam)
    d2 = 3.0 + gamma * 2.0 - 1.5  # last step bootstraps from the state after the rollout
    d1 = 2.0 + gamma * 4.0 - 1.0  # truncation: bootstrap from the final state, ignore step 2
    d0 = 1.0 + gamma * 1.0 - 0.5
    expected = torch.tensor([[d0 + gamma * lam * d1], [d1], [d2]])
    torch.testing.assert_close(adv, expected)


def test_rollout_values_truncated_episodes_from_their_final_state():
    """At a truncation the env has already reset; the TD target must use the critic's value
    of the finished episode's last state (which the env reports), not of the fresh account."""
    agent = make_agent(3)
    learner, env = agent.learners[0], agent.envs[0]
    finals = []
    step = env.step

    def spy(*args, **kwargs):
        out = step(*args, **kwargs)
        finals.append((out.final.index.clone(), out.final.states.clone()))
        return out

    env.step = spy
    rollout = learner.collect(env)
    assert rollout.truncated.any()  # 12 steps of 4..8-bar episodes
    assert rollout.states.is_contiguous() and rollout.states.device == env.device
    checked = 0
    with torch.no_grad():
        for i, (index, states) in enumerate(finals):
            for e, final in zip(index.tolist(), states):
                value, bootstrap = learner.critic(rollout.states[i, e]), learner.critic(final)
                expected = rollout.rewards[i, e] + PPO.gamma * bootstrap - value  # GAE stops at a truncation
                torch.testing.assert_close(rollout.advantages[i, e], expected)
                if i + 1 < PPO.horizon:  # the next state is the new episode's, which differs from the final one
                    assert rollout.states[i + 1, e, 0].item() == pytest.approx(1.0)  # cash / initial cash
                    assert not torch.equal(rollout.states[i + 1, e], final)
                checked += 1
    assert checked == int(rollout.truncated.sum())


def test_copy_from_duplicates_weights_and_optimizer_without_sharing():
    a, b = trained(1), trained(2)
    b.copy_from(a)
    assert all(torch.equal(x, y) for x, y in zip(weights(a), weights(b)))
    state_a = a.learners[0].optimizer.state_dict()["state"][0]["exp_avg"]
    state_b = b.learners[0].optimizer.state_dict()["state"][0]["exp_avg"]
    assert torch.equal(state_a, state_b) and state_a.data_ptr() != state_b.data_ptr()


@pytest.mark.parametrize("learners", [1, 2])
def test_resuming_a_checkpoint_is_bit_identical(tmp_path, learners):
    cfg = dataclasses.replace(PPO, learners=learners)
    straight = trained(5, iterations=4, cfg=cfg)
    first = trained(5, iterations=2, cfg=cfg)
    first.save(tmp_path / "ckpt.pt")
    resumed = make_agent(77, cfg)  # other seeds: everything must come from the checkpoint
    resumed.load(tmp_path / "ckpt.pt")
    for _ in range(2):
        resumed.train_iteration()
    assert all(torch.equal(x, y) for x, y in zip(weights(straight), weights(resumed)))
    assert torch.equal(straight.envs[0].cash, resumed.envs[0].cash)


def test_parallel_learners_are_fused_by_parameter_averaging():
    agent = trained(4, iterations=1, cfg=dataclasses.replace(PPO, learners=3))
    first, *others = agent.learners
    for other in others:  # after each epoch every learner holds the average
        assert all(torch.equal(x, y) for x, y in zip(first.actor.parameters(), other.actor.parameters()))
    # ...while their seeds keep their rollouts (and so their updates) different
    a, b = (learner.collect(env) for learner, env in zip(agent.learners[:2], agent.envs[:2]))
    assert not torch.equal(a.raw_actions, b.raw_actions)
    assert agent.samples_per_iteration == 3 * PPO.num_envs * PPO.horizon


def test_the_cuda_step_path_gives_the_same_rollout():
    """CUDA steps never ask the device which envs truncated; run that path on the CPU and
    check it matches the CPU path (states, rewards and truncations exactly)."""
    cpu, cuda_like = make_agent(3), make_agent(3)
    for env in cuda_like.envs:
        env.host_sync_free = False
    a = cpu.learners[0].collect(cpu.envs[0])
    b = cuda_like.learners[0].collect(cuda_like.envs[0])
    assert a.truncated.any()
    for name in ("states", "raw_actions", "rewards", "truncated"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    torch.testing.assert_close(a.advantages, b.advantages)
