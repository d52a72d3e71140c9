"""Soft Actor-Critic (Haarnoja et al. 2018, "Soft Actor-Critic: Off-Policy Maximum Entropy
Deep RL with a Stochastic Actor", with the automatic temperature of their 2018 follow-up,
"Soft Actor-Critic Algorithms and Applications" §5) on the batched market env: one of the
off-policy learners ElegantRL-podracers lists next to PPO (elegantrl-podracers §4,
"Algorithm variation").

It reads like CleanRL's ``sac_continuous_action.py``. Each iteration
:meth:`SACAgent.collect` steps ``num_envs`` envs for ``horizon`` steps into a
:class:`ReplayBuffer` that stays on the env's device, then :meth:`SACAgent.train_iteration`
takes ``updates`` gradient steps on minibatches drawn from it:

* the twin critics regress on ``y = r + γ (min(Q1', Q2')(s', a') − α log π(a'|s'))``
  (:func:`td_target`), with ``Q'`` the TARGET networks and ``a' ~ π(s')``;
* the actor minimises ``α log π(ã|s) − min(Q1, Q2)(s, ã)`` through a reparameterised
  sample ``ã``;
* the temperature α moves ``log π`` towards the target entropy (:func:`temperature_loss`);
* the target critics track the online ones by Polyak averaging (:func:`soft_update`).

Same MDP, state and actions as PPO: the policy is PPO's :class:`~trainers.common.nets.Actor`, the
env receives ``tanh(u)`` with ``u ~ N(mean, std)``, and serving stays ``tanh(mean)``. The
end of an episode is a truncation, never terminal (docs/training.md, The market MDP), so
every transition bootstraps, and a truncated one's next state is the episode's final state
(:meth:`~trainers.common.env.Step.last_states`), not the reset state.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from trainers import profiler
from trainers.common.draws import restore, to_device
from trainers.common.env import MarketData, MarketEnv
from trainers.common.jobs import JobSetting
from trainers.common.nets import Actor, ActorShape, mlp, new_actor
from trainers.common.state import StateScales
from trainers.config import EnvConfig, SACConfig


def td_target(rewards: torch.Tensor, next_q1: torch.Tensor, next_q2: torch.Tensor, next_logprob: torch.Tensor,
              alpha: float | torch.Tensor, gamma: float) -> torch.Tensor:
    """The soft TD target ``r + γ (min(Q1', Q2') − α log π(a'|s'))``: the target critics'
    clipped double-Q value of ``(s', a' ~ π(s'))`` plus its entropy bonus. No done flag:
    every episode end is a truncation, which bootstraps."""
    return rewards + gamma * (torch.min(next_q1, next_q2) - alpha * next_logprob)


@torch.no_grad()
def soft_update(target: nn.Module, online: nn.Module, tau: float) -> None:
    """Polyak averaging in place: ``θ' ← τ θ + (1 − τ) θ'`` for every parameter."""
    for target_param, param in zip(target.parameters(), online.parameters()):
        target_param.mul_(1.0 - tau).add_(param, alpha=tau)


def temperature_loss(log_alpha: torch.Tensor, logprob: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """``−log α · (log π + H̄)``, averaged (2018b §5, on log α as CleanRL does). Its gradient
    ``−mean(log π + H̄)`` is negative when the policy's entropy ``−log π`` is below the
    target ``H̄``, so gradient descent raises α, and lowers it when the entropy is above."""
    return -(log_alpha * (logprob + target_entropy).detach()).mean()


def squashed_logprob(mean: torch.Tensor, std: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """``log π(tanh(u)|s)``, summed over actions: the Gaussian's log-density of the
    pre-``tanh`` sample ``u`` less ``log(1 − tanh(u)²)`` (the change of variables, SAC
    App. C), written as ``2 (log 2 − u − softplus(−2u))`` so it stays finite where
    ``tanh(u)`` rounds to ±1."""
    gaussian = torch.distributions.Normal(mean, std, validate_args=False).log_prob(u).sum(-1)
    return gaussian - (2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))).sum(-1)


def sample_action(actor: Actor, obs: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """A reparameterised sample ``a = tanh(mean + std · ε)``, ``ε ~ N(0, 1)`` from
    ``generator``, and its ``log π(a|s)``; gradients flow through the mean and std."""
    mean, std = actor.mean(obs), actor.log_std.exp()
    u = mean + std * to_device(torch.randn(mean.shape, generator=generator, device=generator.device), mean.device)
    return torch.tanh(u), squashed_logprob(mean, std, u)


class QNetwork(nn.Module):
    """``Q(s, a)``: an MLP over the state and the squashed action, concatenated."""

    def __init__(self, state_dim: int, action_dim: int, critic_dims: tuple[int, ...]) -> None:
        super().__init__()
        self.net = mlp([state_dim + action_dim, *critic_dims, 1])

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat((obs, actions), dim=-1)).squeeze(-1)


class ReplayBuffer:
    """A ring of ``capacity`` transitions ``(obs, action, reward, next_obs)`` on ``device``;
    the actions are the squashed ones the env received. New rows overwrite the oldest.
    The write position and fill count are host integers (a batch's size is a shape), so
    adding and sampling never wait for the device."""

    FIELDS = ("obs", "actions", "rewards", "next_obs")

    def __init__(self, capacity: int, state_dim: int, action_dim: int, device: torch.device) -> None:
        self.capacity, self.device = capacity, device
        self.obs = torch.zeros((capacity, state_dim), device=device)
        self.actions = torch.zeros((capacity, action_dim), device=device)
        self.rewards = torch.zeros(capacity, device=device)
        self.next_obs = torch.zeros((capacity, state_dim), device=device)
        self.pos = 0
        """The slot the next row goes to."""
        self.filled = 0
        """Slots holding a transition (``capacity`` once the ring has wrapped)."""

    def __len__(self) -> int:
        return self.filled

    def add(self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, next_obs: torch.Tensor) -> None:
        """Write a batch of rows from the write position on, wrapping round to slot 0; rows
        beyond ``capacity`` in one batch leave only the last ``capacity`` (as if written one
        by one)."""
        n = obs.shape[0]
        skip = max(0, n - self.capacity)
        start = (self.pos + skip) % self.capacity
        head = min(n - skip, self.capacity - start)  # rows that fit before the end of the ring
        for name, rows in zip(self.FIELDS, (obs, actions, rewards, next_obs)):
            store, rows = getattr(self, name), rows[skip:]
            store[start : start + head] = rows[:head]
            store[: len(rows) - head] = rows[head:]
        self.pos = (self.pos + n) % self.capacity
        self.filled = min(self.filled + n, self.capacity)

    def sample(self, batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
        """``batch_size`` rows drawn uniformly with replacement from the filled slots:
        ``(b_obs, b_actions, b_rewards, b_next_obs)``."""
        mb_inds = to_device(torch.randint(0, self.filled, (batch_size,), generator=generator, device=generator.device),
                            self.device)
        return tuple(getattr(self, name).index_select(0, mb_inds) for name in self.FIELDS)

    def state_dict(self) -> dict[str, Any]:
        """Copies of the rows, and the position and fill count."""
        return {**{name: getattr(self, name).clone() for name in self.FIELDS}, "pos": self.pos, "filled": self.filled}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for name in self.FIELDS:
            getattr(self, name).copy_(state[name])
        self.pos, self.filled = int(state["pos"]), int(state["filled"])


class SACAgent:
    """A SAC learner and its envs on the training window, with the interface of
    :class:`~trainers.ppo.agent.PPOAgent`: ``train_iteration`` then ``state_dict`` resumes bit
    for bit, and ``copy_from`` is the selector's exploit step (here with the replay buffer,
    so a copy keeps learning from its parent's experience)."""

    def __init__(self, data: MarketData, scales: StateScales, env_cfg: EnvConfig, cfg: SACConfig,
                 window: tuple[int, int], seed: int, rng_device: torch.device | str | None = None) -> None:
        self.cfg = cfg
        self.seed = seed
        self.env = MarketEnv(data, scales, env_cfg, cfg.num_envs, window, seed=seed, rng_device=rng_device)
        device, dims, actions = self.env.device, self.env.state_dim, self.env.action_dim
        shape = ActorShape.of(data.n_stocks, data.n_features, scales, cfg.policy)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.actor = new_actor(shape, cfg.net_dims, cfg.init_log_std).to(device)
            self.critics = nn.ModuleList([QNetwork(dims, actions, cfg.critic_dims) for _ in range(2)]).to(device)
        self.targets = copy.deepcopy(self.critics).requires_grad_(False)
        """The target critics ``Q1', Q2'``: copies that follow by :func:`soft_update`."""
        self.log_alpha = torch.tensor(math.log(cfg.init_alpha), device=device, requires_grad=True)
        self.target_entropy = cfg.target_entropy * data.n_stocks
        # fused: the step count lives on the device and no step reads it back (docs/training.md)
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=cfg.lr, fused=True)
        self.critic_optimizer = torch.optim.Adam(self.critics.parameters(), lr=cfg.lr, fused=True)
        self.alpha_optimizer = torch.optim.Adam([self.log_alpha], lr=cfg.lr, fused=True)
        self.generator = torch.Generator(device=rng_device or device).manual_seed(seed)
        """The agent's random stream: action noise and buffer draws."""
        self.buffer = ReplayBuffer(cfg.buffer_size, dims, actions, device)
        self.obs: torch.Tensor | None = None
        """The envs' current states (``None`` before the first iteration)."""

    @classmethod
    def of(cls, setting: JobSetting, hparams: Mapping[str, float], seed: int,
           state: Mapping[str, Any] | None = None) -> SACAgent:
        """An agent of a run's ``setting`` with ``hparams`` applied to ``sac``: fresh, or restored
        from ``state`` (its ``state_dict()``, which the agent copies)."""
        agent = cls(setting.data, setting.scales, setting.env_cfg, setting.sac_cfg.with_hparams(hparams),
                    setting.train_window, seed, setting.rng_device)
        if state is not None:
            agent.load_state_dict(state)
        return agent

    @property
    def optimizers(self) -> dict[str, torch.optim.Adam]:
        return {"actor_optimizer": self.actor_optimizer, "critic_optimizer": self.critic_optimizer,
                "alpha_optimizer": self.alpha_optimizer}

    @property
    def samples_per_iteration(self) -> int:
        return self.cfg.num_envs * self.cfg.horizon

    def set_hparams(self, values: Mapping[str, float]) -> None:
        """Apply evolved hyperparameters; the network shape stays, so ``net_width`` must be its own."""
        self.cfg = self.cfg.with_hparams(values)
        for optimizer in self.optimizers.values():
            for group in optimizer.param_groups:
                group["lr"] = self.cfg.lr

    @torch.no_grad()
    def collect(self) -> torch.Tensor:
        """Step the envs ``horizon`` times with actions sampled from the policy, writing every
        transition into the buffer; returns the rewards ``[horizon, num_envs]``."""
        if self.obs is None:
            self.obs = self.env.reset()
        rewards = torch.empty((self.cfg.horizon, self.env.num_envs), device=self.env.device)
        for t in range(self.cfg.horizon):
            with profiler.operation("inference"):
                actions, _ = sample_action(self.actor, self.obs, self.generator)
            with profiler.operation("simulation"):
                step = self.env.step(actions)
            # a truncated env has already reset: its transition ends at its episode's final state
            self.buffer.add(self.obs, actions, step.reward, step.last_states())
            self.obs, rewards[t] = step.state, step.reward
        return rewards

    def critic_loss(self, b_obs: torch.Tensor, b_actions: torch.Tensor, b_rewards: torch.Tensor,
                    b_next_obs: torch.Tensor) -> torch.Tensor:
        """The mean over both critics and the minibatch of ``(Q(s, a) − y)²``, ``y`` the soft
        TD target of the target critics (:func:`td_target`), held fixed."""
        with torch.no_grad():
            next_actions, next_logprob = sample_action(self.actor, b_next_obs, self.generator)
            next_q1, next_q2 = (q(b_next_obs, next_actions) for q in self.targets)
            y = td_target(b_rewards, next_q1, next_q2, next_logprob, self.log_alpha.exp(), self.cfg.gamma)
        q_values = torch.stack([q(b_obs, b_actions) for q in self.critics])
        return (q_values - y).pow(2).mean()

    def gradient_step(self) -> tuple[torch.Tensor, torch.Tensor]:
        """One update on a minibatch from the buffer: critics, actor, temperature, then the
        targets. Returns the critic and actor losses (detached, on the device)."""
        b_obs, b_actions, b_rewards, b_next_obs = self.buffer.sample(self.cfg.batch_size, self.generator)
        critic_loss = self.critic_loss(b_obs, b_actions, b_rewards, b_next_obs)
        self.critic_optimizer.zero_grad()
        critic_loss.backward()
        self.critic_optimizer.step()

        alpha = self.log_alpha.exp().detach()
        actions, logprob = sample_action(self.actor, b_obs, self.generator)
        self.critics.requires_grad_(False)  # the actor's loss differentiates through Q, never into it
        q1, q2 = (q(b_obs, actions) for q in self.critics)
        actor_loss = (alpha * logprob - torch.min(q1, q2)).mean()
        self.actor_optimizer.zero_grad()
        actor_loss.backward()
        self.actor_optimizer.step()
        self.critics.requires_grad_(True)

        alpha_loss = temperature_loss(self.log_alpha, logprob, self.target_entropy)
        self.alpha_optimizer.zero_grad()
        alpha_loss.backward()
        self.alpha_optimizer.step()

        soft_update(self.targets, self.critics, self.cfg.tau)
        return critic_loss.detach(), actor_loss.detach()

    def train_iteration(self) -> dict[str, float]:
        """Collect ``num_envs × horizon`` transitions, then take ``updates`` gradient steps
        once the buffer holds a minibatch. Returns the mean losses (NaN before the first
        update), α and the mean reward, read from the device once, at the end."""
        rewards = self.collect()
        losses = []
        if len(self.buffer) >= self.cfg.batch_size:
            for _ in range(self.cfg.updates):
                with profiler.operation("backprop"):
                    losses.append(torch.stack(self.gradient_step()))
        self.env.check_capacity()  # the losses are read back here anyway
        critic_loss, actor_loss = torch.stack(losses).mean(0).tolist() if losses else (math.nan, math.nan)
        return {"critic_loss": critic_loss, "actor_loss": actor_loss, "alpha": float(self.log_alpha.detach().exp()),
                "reward": float(rewards.mean())}

    def copy_from(self, other: SACAgent) -> None:
        """Take ``other``'s networks, targets, optimizer states, temperature, hyperparameters
        and replay buffer (as copies); keep this agent's random stream, envs and states."""
        self.actor.load_state_dict(other.actor.state_dict())
        self.critics.load_state_dict(other.critics.state_dict())
        self.targets.load_state_dict(other.targets.state_dict())
        for name, optimizer in self.optimizers.items():
            optimizer.load_state_dict(copy.deepcopy(other.optimizers[name].state_dict()))
        with torch.no_grad():
            self.log_alpha.copy_(other.log_alpha)
        self.set_hparams(other.cfg.hparams())
        self.buffer.load_state_dict(other.buffer.state_dict())

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue bit for bit, as copies: networks, targets,
        optimizers, α, hyperparameters, the random stream, the envs, the buffer and the
        envs' current states."""
        state = {"actor": self.actor.state_dict(), "critics": self.critics.state_dict(),
                 "targets": self.targets.state_dict(),
                 **{name: optimizer.state_dict() for name, optimizer in self.optimizers.items()},
                 "log_alpha": self.log_alpha.detach(), "hparams": self.cfg.hparams(), "rng": self.generator.get_state(),
                 "env": self.env.state_dict(), "obs": self.obs}
        return {**copy.deepcopy(state), "buffer": self.buffer.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.actor.load_state_dict(state["actor"])
        self.critics.load_state_dict(state["critics"])
        self.targets.load_state_dict(state["targets"])
        for name, optimizer in self.optimizers.items():
            optimizer.load_state_dict(copy.deepcopy(state[name]))  # Adam keeps the tensors it is given
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.set_hparams(state["hparams"])
        restore(self.generator, state["rng"], self.seed)
        self.env.load_state_dict(state["env"])
        self.buffer.load_state_dict(state["buffer"])
        obs = state["obs"]
        self.obs = None if obs is None else obs.to(self.env.device).clone()
