import torch

from trainers.env import EnvConfig, MarketEnv
from trainers.ppo import PPOAgent, PPOConfig, gae_advantages

from .helpers import market, scales

ENV = EnvConfig(initial_cash=10_000.0, hmax=10, episode_len=8)
PPO = PPOConfig(num_envs=4, horizon=12, batch_size=16, repeat_times=2, net_dims=(16,))


def trained(seed: int) -> PPOAgent:
    data = market()
    env = MarketEnv(data, scales(data, ENV), ENV, PPO.num_envs, (0, 39), seed=seed)
    agent = PPOAgent(env.state_dim, env.action_dim, PPO, seed, torch.device("cpu"))
    for _ in range(3):
        stats = agent.update(agent.collect(env))
    assert all(torch.isfinite(torch.tensor(v)) for v in stats.values())
    return agent


def test_same_seed_gives_bit_identical_weights():
    a, b, c = trained(1), trained(1), trained(2)
    for (name, x), y, z in zip(a.actor.state_dict().items(), b.actor.state_dict().values(),
                               c.actor.state_dict().values()):
        assert torch.equal(x, y), name
    assert not all(torch.equal(x, z) for x, z in zip(a.actor.state_dict().values(), c.actor.state_dict().values()))


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


def test_copy_from_duplicates_weights_and_optimizer_without_sharing():
    a, b = trained(1), trained(2)
    b.copy_from(a)
    assert all(torch.equal(x, y) for x, y in zip(a.actor.state_dict().values(), b.actor.state_dict().values()))
    state_a = a.optimizer.state_dict()["state"][0]["exp_avg"]
    state_b = b.optimizer.state_dict()["state"][0]["exp_avg"]
    assert torch.equal(state_a, state_b) and state_a.data_ptr() != state_b.data_ptr()
