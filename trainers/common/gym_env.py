"""gymnasium adapters over :class:`trainers.common.env.MarketEnv`, for other RL libraries.

:class:`MarketGymEnv` is one account as a ``gymnasium.Env`` (Stable-Baselines3 trains on
it); :class:`MarketVectorEnv` is the batched env as a ``gymnasium.vector.VectorEnv``
with same-step autoreset. Both run the one MDP implementation, so a policy trained
through them faces exactly the rules our own PPO trains under (docs/design.md, The market MDP). Episodes end
by truncation only: the MDP has no terminal state.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.spaces import Box
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from trainers.common.env import MarketData, MarketEnv
from trainers.common.state import FEATURE_CLIP, StateScales
from trainers.config import EnvConfig


def _spaces(env: MarketEnv) -> tuple[Box, Box]:
    """Cash, shares and price ratios are ≥ 0 and unbounded; indicators are clipped."""
    head = 1 + 2 * env.action_dim
    low = np.full(env.state_dim, -FEATURE_CLIP, dtype=np.float32)
    high = np.full(env.state_dim, FEATURE_CLIP, dtype=np.float32)
    low[:head], high[:head] = 0.0, np.inf
    observation = Box(low, high, dtype=np.float32)
    action = Box(-1.0, 1.0, (env.action_dim,), np.float32)
    return observation, action


def _actions(env: MarketEnv, action: Any) -> torch.Tensor:
    array = np.asarray(action, dtype=np.float32).reshape(env.num_envs, env.action_dim)
    return torch.as_tensor(array, device=env.device)


class MarketGymEnv(gym.Env[np.ndarray, np.ndarray]):
    """One trading account; with ``random_start`` each reset draws a new training episode,
    without it the episode runs once over ``window`` (validation, backtests)."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        data: MarketData,
        scales: StateScales,
        cfg: EnvConfig,
        window: tuple[int, int],
        *,
        random_start: bool = True,
        seed: int = 0,
    ) -> None:
        self.market = MarketEnv(data, scales, cfg, 1, window, random_start=random_start, seed=seed)
        self.observation_space, self.action_space = _spaces(self.market)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if seed is not None:
            self.market.generator.manual_seed(seed)
        return self.market.reset()[0].cpu().numpy(), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        step = self.market.step(_actions(self.market, action))
        # On truncation the inner env has already started its next episode; gymnasium wants
        # the last observation of the finished one, and the caller's reset() starts anew.
        obs = step.last_states()[0].cpu().numpy()
        return obs, float(step.reward[0]), False, bool(step.truncated[0]), {}


class MarketVectorEnv(VectorEnv[np.ndarray, np.ndarray, np.ndarray]):
    """``num_envs`` accounts stepped as one batch, random episodes, same-step autoreset:
    a truncated env's next observation already belongs to its new episode, and the last
    observation of the old one is in ``infos["final_obs"]`` (gymnasium 1.x convention)."""

    metadata: dict[str, Any] = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(
        self,
        data: MarketData,
        scales: StateScales,
        cfg: EnvConfig,
        num_envs: int,
        window: tuple[int, int],
        *,
        seed: int = 0,
    ) -> None:
        self.market = MarketEnv(data, scales, cfg, num_envs, window, seed=seed)
        self.num_envs = num_envs
        self.single_observation_space, self.single_action_space = _spaces(self.market)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)

    def reset(
        self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        first = seed[0] if isinstance(seed, list) else seed
        super().reset(seed=first)
        if first is not None:
            self.market.generator.manual_seed(first)
        return self.market.reset().cpu().numpy(), {}

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        step = self.market.step(_actions(self.market, actions))
        done = step.truncated.cpu().numpy()
        infos: dict[str, Any] = {}
        if done.any():
            finals = np.full(self.num_envs, None, dtype=object)
            rows = step.last_states().cpu().numpy()
            for i in np.flatnonzero(done):
                finals[i] = rows[i]
            infos = {"final_obs": finals, "_final_obs": done.copy()}
        terminated = np.zeros(self.num_envs, dtype=np.bool_)
        return step.state.cpu().numpy(), step.reward.cpu().numpy(), terminated, done, infos
