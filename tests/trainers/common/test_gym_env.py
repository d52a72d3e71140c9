import warnings

import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env, check_space_limit, data_equivalence
from gymnasium.utils.passive_env_checker import check_action_space, check_observation_space

from tests.trainers.helpers import market, scales
from trainers.common.gym_env import MarketGymEnv, MarketVectorEnv
from trainers.config import EnvConfig

CFG = EnvConfig(initial_cash=10_000.0, hmax=10, episode_len=8, min_episode_len=4)


def single(random_start: bool = True) -> MarketGymEnv:
    data = market()
    return MarketGymEnv(data, scales(data, CFG), CFG, (0, 39), random_start=random_start, seed=1)


def vector(num_envs: int = 5) -> MarketVectorEnv:
    data = market()
    return MarketVectorEnv(data, scales(data, CFG), CFG, num_envs, (0, 39), seed=1)


@pytest.mark.parametrize("random_start", [True, False])
def test_single_env_passes_gymnasium_env_checker(random_start):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(single(random_start), skip_render_check=True)
    # the only remark allowed: cash and holdings have no upper bound. A ResourceWarning is not
    # the checker's: the garbage collector may free another test's object in the meantime (the
    # supervisor `services.up` leaves running, for one)
    remarks = [w for w in caught if not issubclass(w.category, ResourceWarning)]
    assert [str(w.message) for w in remarks if "maximum value is infinity" not in str(w.message)] == []


def test_single_env_truncates_and_returns_the_final_observation():
    """Buying 2 of each stock every bar: the observation at truncation holds the finished
    episode's shares and last close, not the next episode's fresh account."""
    data = market()
    cfg = EnvConfig(initial_cash=10_000.0, hmax=2, episode_len=8, min_episode_len=4)
    env = MarketGymEnv(data, scales(data, cfg), cfg, (0, 39), seed=1)
    obs, _ = env.reset(seed=3)
    start = int(env.market.t[0])
    assert obs[1:4].tolist() == [0.0, 0.0, 0.0]
    for step in range(1, 10):
        obs, reward, terminated, truncated, _ = env.step(np.ones(3, dtype=np.float32))
        assert obs.dtype == np.float32 and isinstance(reward, float) and not terminated
        if truncated:
            break
    assert truncated and step >= min(CFG.min_episode_len, 39 - start)
    assert obs[1:4].tolist() == [step] * 3  # 2·step shares each, scaled by 1/hmax
    last_close = (data.close[start + step] / data.close[0]).to(torch.float32).numpy()
    np.testing.assert_array_equal(obs[4:7], last_close)
    assert env.reset()[0][1:4].tolist() == [0.0, 0.0, 0.0]


def test_vector_env_follows_the_vector_api():
    env = vector()
    check_space_limit(env.single_action_space, "action")
    check_action_space(env.single_action_space)
    check_observation_space(env.single_observation_space)
    obs, _ = env.reset(seed=7)
    again, _ = env.reset(seed=7)
    assert data_equivalence(obs, again) and obs in env.observation_space  # reset seeding
    env.action_space.seed(0)
    seen_final = False
    for _ in range(12):
        obs, rewards, terminated, truncated, infos = env.step(env.action_space.sample())
        assert obs in env.observation_space and rewards.shape == (5,) and rewards.dtype == np.float32
        assert not terminated.any()
        if truncated.any():
            seen_final = True
            assert (infos["_final_obs"] == truncated).all()
            for i in np.flatnonzero(truncated):
                assert infos["final_obs"][i].shape == env.single_observation_space.shape
                assert not np.array_equal(infos["final_obs"][i], obs[i])
    assert seen_final


def test_vector_env_steps_are_deterministic_under_a_seed():
    runs = []
    for _ in range(2):
        env = vector()
        env.reset(seed=11)
        env.action_space.seed(11)
        runs.append([env.step(env.action_space.sample())[:4] for _ in range(10)])
    assert data_equivalence(runs[0], runs[1])


def test_stable_baselines3_ppo_trains_on_the_single_env():
    from stable_baselines3 import PPO
    from stable_baselines3.common.logger import Logger

    env = single()
    model = PPO("MlpPolicy", env, n_steps=64, batch_size=32, n_epochs=2, seed=0, device="cpu",
                policy_kwargs={"net_arch": [16]})
    model.set_logger(Logger(None, []))  # no SB3-<time> folder in /tmp
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(total_timesteps=128)
    assert model.num_timesteps == 128
    assert any(not torch.equal(a, b) for a, b in zip(before, model.policy.parameters()))
    action, _ = model.predict(env.reset(seed=0)[0], deterministic=True)
    assert action.shape == (3,)
