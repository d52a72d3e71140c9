"""The env's batch of accounts (``trainers/common/accounts.py``): a checkpoint resumes the same
episodes, and a stack of envs steps exactly as its parts."""

import torch

from tests.trainers.helpers import market, scales
from trainers.common.env import MarketEnv
from trainers.config import EnvConfig

CFG = EnvConfig(initial_cash=10_000.0, hmax=10, cost_pct=0.002, episode_len=8, min_episode_len=3)


def test_env_state_dict_resumes_the_same_episodes():
    data = market()
    a = MarketEnv(data, scales(data, CFG), CFG, num_envs=8, window=(0, 39), seed=4)
    a.reset()
    for _ in range(5):
        a.step(torch.rand(8, 3) * 2 - 1)
    b = MarketEnv(data, scales(data, CFG), CFG, num_envs=8, window=(0, 39), seed=99)
    b.load_state_dict(a.state_dict())
    action = torch.rand(8, 3) * 2 - 1
    for _ in range(12):
        x, y = a.step(action), b.step(action)
        for u, v in zip([*x[:3], *x.final], [*y[:3], *y.final]):
            assert torch.equal(u, v)


def test_a_stack_of_envs_steps_exactly_as_its_parts():
    data = market(t=60)
    cfg = EnvConfig(initial_cash=10_000.0, hmax=10, episode_len=6, min_episode_len=2)
    s = scales(data, cfg)

    def parts():
        return [MarketEnv(data, s, cfg, n, (0, 59), seed=seed) for n, seed in ((3, 1), (5, 2))]

    alone, together = parts(), parts()
    for env in (*alone, *together):
        env.reset()
    stack = MarketEnv.stack(together)
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        action = torch.rand((8, data.n_stocks), generator=g) * 2 - 1
        joint = stack.step(action)
        single = [env.step(a) for env, a in zip(alone, action.split([3, 5]))]
        assert torch.equal(joint.state, torch.cat([step.state for step in single]))
        assert torch.equal(joint.reward, torch.cat([step.reward for step in single]))
        assert torch.equal(joint.truncated, torch.cat([step.truncated for step in single]))
    stack.unstack(together)
    for a, b in zip(alone, together):
        for key, value in a.state_dict().items():
            assert torch.equal(value, b.state_dict()[key])
