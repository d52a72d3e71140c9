"""A PPO agent: K parallel learners fused by parameter averaging (finrl-podracer §4.4).

"All parallel learners are initialized with different random seeds and synchronized at
the end of each training epoch", and they communicate by sending network parameters,
not gradients: once per epoch, every learner's actor and critic become the average of
all K (:meth:`trainers.ppo.ppo.PPO.fuse`). Here the K learners start from one set of weights
(the agent's seed) and draw their actions, minibatches and episodes from their own
seeds, so their rollouts are independent samples of the same policy. With K = 1 the
agent is a single plain PPO learner.

An agent holds its training state between iterations; :mod:`trainers.ppo.multiplex` trains
agents with :class:`trainers.ppo.ppo.PPO`. Its state dict is everything a run needs to
continue bit for bit: weights, Adam moments, hyperparameters, every random stream and the
envs' accounts and clocks.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from trainers.common.draws import restore
from trainers.common.env import MarketData, MarketEnv
from trainers.common.jobs import JobSetting
from trainers.common.nets import Actor, ActorShape, Critic, new_actor
from trainers.common.state import StateScales, StockLayout
from trainers.config import EnvConfig, PPOConfig

SEED_STRIDE = 7919
"""Learner j of an agent seeded ``s`` uses seed ``s + j * SEED_STRIDE``."""


@dataclass
class Learner:
    """One learner between iterations: its networks, its Adam moments (the ``"state"`` of
    ``torch.optim.Adam.state_dict()``), the random stream of its actions and minibatches,
    and its envs' current states (``None`` before the first rollout)."""

    cfg: PPOConfig
    actor: Actor
    critic: Critic
    optimizer: dict[str, Any]
    generator: torch.Generator
    obs: torch.Tensor | None = None
    seed: int = 0
    """The seed of ``generator``: where its stream restarts when a saved state does not fit it."""
    average: Actor | None = None
    """The average of the actor's weights over its iterations (``ppo.average``); None before any."""
    averaged: int = 0
    """Iterations folded into ``average``."""
    anchor: Actor | None = None
    """The actor as its lineage started (``ppo.anchor`` > 0): what each Adam step pulls its layers towards."""

    @property
    def policy(self) -> Actor:
        """The actor this learner hands on: its average with ``ppo.average``, else its last weights."""
        return self.average if self.average is not None else self.actor

    @classmethod
    def fresh(cls, state_dim: int, action_dim: int, cfg: PPOConfig, seed: int, device: torch.device,
              layout: StockLayout | None = None, init_seed: int | None = None,
              rng_device: torch.device | str | None = None) -> Learner:
        """Networks initialised from ``init_seed`` (default ``seed``), actions and minibatches
        drawn from ``seed`` (on ``rng_device``, default ``device``: trainers/common/draws.py)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed if init_seed is None else init_seed)
            actor = new_actor(ActorShape(state_dim, action_dim, layout), cfg.net_dims, cfg.init_log_std,
                              cfg.start_ranked_by).to(device)
            critic = Critic(state_dim, cfg.net_dims).to(device)
        generator = torch.Generator(device=rng_device or device).manual_seed(seed)
        anchor = copy.deepcopy(actor).requires_grad_(False) if cfg.anchor else None
        return cls(cfg, actor, critic, {"state": {}}, generator, seed=seed, anchor=anchor)

    def set_hparams(self, values: Mapping[str, float]) -> None:
        """Apply evolved hyperparameters; the network shape stays, so ``net_width`` must be its own."""
        self.cfg = self.cfg.with_hparams(values)

    def copy_from(self, other: Learner) -> None:
        """Take ``other``'s weights, Adam moments, hyperparameters and start (the selector's exploit step)."""
        self.actor.load_state_dict(other.actor.state_dict())
        self.critic.load_state_dict(other.critic.state_dict())
        self.optimizer = copy.deepcopy(other.optimizer)
        self.average, self.averaged = copy.deepcopy(other.average), other.averaged
        self.anchor = copy.deepcopy(other.anchor)
        self.set_hparams(other.cfg.hparams())

    def state_dict(self) -> dict[str, Any]:
        return {"actor": self.actor.state_dict(), "critic": self.critic.state_dict(), "optimizer": self.optimizer,
                "hparams": self.cfg.hparams(), "rng": self.generator.get_state(), "obs": self.obs,
                "average": None if self.average is None else self.average.state_dict(), "averaged": self.averaged,
                "anchor": None if self.anchor is None else self.anchor.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        self.optimizer = {"state": copy.deepcopy(state["optimizer"]["state"])}
        self.set_hparams(state["hparams"])
        restore(self.generator, state["rng"], self.seed)
        obs = state["obs"]
        self.obs = None if obs is None else obs.to(self.actor.log_std.device).clone()
        self.average, self.averaged = None, int(state.get("averaged", 0))
        if state.get("average") is not None:
            self.average = copy.deepcopy(self.actor)
            self.average.load_state_dict(state["average"])
        if state.get("anchor") is not None:
            self.anchor = copy.deepcopy(self.actor).requires_grad_(False)
            self.anchor.load_state_dict(state["anchor"])


def policy_weights(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The policy's weights in a :meth:`PPOAgent.state_dict`: its first learner's average when
    it keeps one (``ppo.average``), else its last weights (copies)."""
    learner = state["learners"][0]
    return copy.deepcopy(learner["average"] if learner.get("average") is not None else learner["actor"])


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
        rng_device: torch.device | str | None = None,
    ) -> None:
        device = data.close.device
        seeds = [seed + j * SEED_STRIDE for j in range(cfg.learners)]
        self.envs = [MarketEnv(data, scales, env_cfg, cfg.num_envs, window, seed=s, rng_device=rng_device)
                     for s in seeds]
        shape = ActorShape.of(data.n_stocks, data.n_features, scales, cfg.policy)
        self.learners = [Learner.fresh(shape.state_dim, shape.n_stocks, cfg, s, device, shape.layout, init_seed=seed,
                                       rng_device=rng_device) for s in seeds]

    @classmethod
    def of(cls, setting: JobSetting, hparams: Mapping[str, float], seed: int,
           state: dict[str, Any] | None = None) -> PPOAgent:
        """An agent of a run's ``setting`` with ``hparams`` applied to ``ppo``: fresh, or restored
        from ``state`` (its ``state_dict()``, which the agent copies)."""
        agent = cls(setting.data, setting.scales, setting.env_cfg, setting.ppo_cfg.with_hparams(hparams),
                    setting.train_window, seed, setting.rng_device)
        if state is not None:
            agent.load_state_dict(state)
        return agent

    @property
    def cfg(self) -> PPOConfig:
        return self.learners[0].cfg

    @property
    def actor(self) -> Actor:
        """The agent's last weights (after an iteration every learner holds the same ones)."""
        return self.learners[0].actor

    @property
    def policy(self) -> Actor:
        """The agent's policy: its averaged weights with ``ppo.average``, else :attr:`actor`."""
        return self.learners[0].policy

    @property
    def samples_per_iteration(self) -> int:
        return self.cfg.learners * self.cfg.num_envs * self.cfg.horizon

    def set_hparams(self, values: dict[str, float]) -> None:
        for learner in self.learners:
            learner.set_hparams(values)

    def resize_envs(self, num_envs: int) -> None:
        """Give every learner ``num_envs`` envs from the next rollout on (Nitro's actor
        scaling): running episodes continue, new envs start fresh ones."""
        for learner, env in zip(self.learners, self.envs):
            env.resize(num_envs)
            if learner.obs is not None:
                learner.obs = env.observe()
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
