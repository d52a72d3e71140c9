"""A PPO agent: K parallel learners fused by parameter averaging (finrl-podracer.txt §4.4).

"All parallel learners are initialized with different random seeds and synchronized at
the end of each training epoch", and they communicate by sending network parameters,
not gradients: once per epoch, every learner's actor and critic become the average of
all K. With K = 1 the agent is a single plain PPO learner. Each learner owns its batch
of training envs, so the K rollouts are independent samples of the same policy.

An agent checkpoints everything a run needs to continue bit for bit: weights, optimizer
moments, hyperparameters, every random stream and the envs' accounts and clocks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from trainers import profiler
from trainers.env import EnvConfig, MarketData, MarketEnv
from trainers.ppo import Actor, PPOConfig, PPOLearner, Rollout
from trainers.state import StateScales, StockLayout, state_dim

SEED_STRIDE = 7919
"""Learner j of an agent seeded ``s`` uses seed ``s + j * SEED_STRIDE``."""


def stock_layout(data: MarketData, scales: StateScales) -> StockLayout:
    """The per-stock layout of ``data``'s states (for ``ppo.policy: shared``)."""
    return StockLayout(data.n_stocks, data.n_features, scales)


def blank_actor(data: MarketData, scales: StateScales, cfg: PPOConfig) -> Actor:
    """A deterministic actor of ``cfg``'s shape for ``data``, to load trained weights into."""
    layout = stock_layout(data, scales) if cfg.policy == "shared" else None
    return Actor(state_dim(data.n_stocks, data.n_features), data.n_stocks, cfg.net_dims, 0.0, layout)


class PPOAgent:
    """``cfg.learners`` learners and their envs on the training window, trained as one."""

    def __init__(
        self,
        data: MarketData,
        scales: StateScales,
        env_cfg: EnvConfig,
        cfg: PPOConfig,
        window: tuple[int, int],
        seed: int,
    ) -> None:
        device = data.close.device
        seeds = [seed + j * SEED_STRIDE for j in range(cfg.learners)]
        self.envs = [MarketEnv(data, scales, env_cfg, cfg.num_envs, window, seed=s) for s in seeds]
        dims, actions = self.envs[0].state_dim, self.envs[0].action_dim
        layout = stock_layout(data, scales) if cfg.policy == "shared" else None
        self.learners = [PPOLearner(dims, actions, cfg, s, device, layout) for s in seeds]
        self.fuse()  # learners start from one set of weights; their seeds differ in sampling
        self.last_rollout: Rollout | None = None
        """Learner 0's latest rollout (Nitro's detector inspects it, nitro §6.2)."""

    @property
    def cfg(self) -> PPOConfig:
        return self.learners[0].cfg

    @property
    def actor(self) -> Actor:
        """The agent's policy (after :meth:`fuse` every learner holds the same one)."""
        return self.learners[0].actor

    @property
    def samples_per_iteration(self) -> int:
        return self.cfg.learners * self.cfg.num_envs * self.cfg.horizon

    def train_iteration(self) -> dict[str, float]:
        """One epoch: every learner collects a rollout and updates, then parameters fuse."""
        rollouts = [learner.collect(env) for learner, env in zip(self.learners, self.envs)]
        stats = [learner.update(rollout) for learner, rollout in zip(self.learners, rollouts)]
        self.last_rollout = rollouts[0]
        with profiler.operation("fuse"):
            self.fuse()
        return {key: sum(s[key] for s in stats) / len(stats) for key in stats[0]}

    @torch.no_grad()
    def fuse(self) -> None:
        """Average actor and critic parameters over the learners (a no-op for one learner)."""
        if len(self.learners) == 1:
            return
        for name in ("actor", "critic"):
            modules = [getattr(learner, name) for learner in self.learners]
            for params in zip(*(m.parameters() for m in modules)):
                mean = torch.stack(params).mean(dim=0)
                for p in params:
                    p.copy_(mean)

    def set_hparams(self, values: dict[str, float]) -> None:
        for learner in self.learners:
            learner.set_hparams(values)

    def resize_envs(self, num_envs: int) -> None:
        """Give every learner ``num_envs`` envs from the next rollout on (Nitro's actor
        scaling): running episodes continue, new envs start fresh ones."""
        for learner, env in zip(self.learners, self.envs):
            env.resize(num_envs)
            if learner._state is not None:
                learner._state = env.observe()
            learner.set_hparams({"num_envs": num_envs})

    def copy_from(self, other: PPOAgent) -> None:
        """Take ``other``'s weights and optimizer states, learner by learner."""
        for mine, theirs in zip(self.learners, other.learners):
            mine.copy_from(theirs)

    def state_dict(self) -> dict[str, Any]:
        return {"learners": [learner.state_dict() for learner in self.learners],
                "envs": [env.state_dict() for env in self.envs]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["learners"]) != len(self.learners):
            raise ValueError(f"checkpoint has {len(state['learners'])} learners, the agent {len(self.learners)}")
        for learner, saved in zip(self.learners, state["learners"]):
            learner.load_state_dict(saved)
        for env, saved in zip(self.envs, state["envs"]):
            env.load_state_dict(saved)

    def save(self, path: Path) -> None:
        """Write a checkpoint atomically (temp file, then rename)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        torch.save(self.state_dict(), tmp)
        tmp.replace(path)

    def load(self, path: Path) -> None:
        """Resume from :meth:`save`'s checkpoint; training then continues bit for bit."""
        self.load_state_dict(torch.load(path, map_location=self.envs[0].device, weights_only=True))
