"""Proximal Policy Optimization (Schulman et al. 2017), as used by finrl-podracer.txt §5.

Owned here rather than taken from a library (DESIGN §3: API churn). Defaults follow
finrl-podracer.txt Table 3: Adam, lr 2^-14, γ 0.99, batch 2^10, repeat 2^3, buffer 2^12
(``num_envs × horizon``), ratio clip 0.25, entropy 0.02.

The rollout buffer is a set of contiguous tensors on the env's device (§4.4, "replay
buffer on GPU"), filled without a host round trip; truncated episodes bootstrap their
value (DESIGN §2, end of data). :class:`PPOLearner` is one learner; several learners
fused by parameter averaging make an agent (:mod:`trainers.agent`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Literal, NamedTuple

import torch
from torch import nn

from trainers import profiler
from trainers._checks import require
from trainers.env import MarketEnv
from trainers.state import StockLayout

HPARAMS = ("lr", "entropy_coef", "clip", "gamma", "gae_lambda", "repeat_times", "num_envs", "net_width")
"""Hyperparameters that may differ between agents of a population and be evolved;
``net_width`` is the first hidden layer's width (the others keep their proportions)."""


@dataclass(frozen=True)
class PPOConfig:
    """PPO hyperparameters (finrl-podracer.txt Table 3 defaults)."""

    __pydantic_config__ = {"extra": "forbid"}

    lr: float = 2**-14
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip: float = 0.25
    entropy_coef: float = 0.02
    value_coef: float = 0.5
    max_grad_norm: float = 0.5
    batch_size: int = 2**10
    repeat_times: int = 2**3
    """Passes (epochs) over each rollout."""
    num_envs: int = 2**5
    horizon: int = 2**7
    """Steps per env per rollout; ``num_envs × horizon`` is the buffer size (2^12)."""
    net_dims: tuple[int, ...] = (128, 64)
    init_log_std: float = -0.5
    learners: int = 1
    """Parallel learners per agent, each with its own seed and envs, whose parameters are
    averaged at the end of every epoch (finrl-podracer.txt §4.4)."""
    policy: Literal["mlp", "shared"] = "mlp"
    """``mlp``: one network over the whole state (the paper's). ``shared``: one per-stock
    scorer applied to every stock (:class:`trainers.state.StockLayout`); the critic stays
    an MLP over the whole state."""
    credit: Literal["joint", "per_stock"] = "joint"
    """``joint``: one GAE(λ) advantage for the whole action (the paper's). ``per_stock``:
    each stock's action gets its own advantage, the env's difference reward
    (:meth:`trainers.env.MarketEnv._credit`), and its own clipped ratio; the critic still
    learns the GAE returns."""

    def __post_init__(self) -> None:
        require(self.lr > 0, "lr must be > 0")
        require(0 < self.gamma <= 1, "gamma must be in (0, 1]")
        require(0 <= self.gae_lambda <= 1, "gae_lambda must be in [0, 1]")
        require(0 < self.clip < 1, "clip must be in (0, 1)")
        require(self.entropy_coef >= 0, "entropy_coef must be >= 0")
        require(self.batch_size >= 1, "batch_size must be >= 1")
        require(self.repeat_times >= 1, "repeat_times must be >= 1")
        require(self.num_envs >= 1 and self.horizon >= 1, "num_envs and horizon must be >= 1")
        require(len(self.net_dims) >= 1 and min(self.net_dims) >= 1, "net_dims must be positive")
        require(self.learners >= 1, "learners must be >= 1")

    @property
    def net_width(self) -> int:
        return self.net_dims[0]

    def hparams(self) -> dict[str, float]:
        """The evolvable hyperparameters as a plain dict."""
        return {name: float(getattr(self, name)) for name in HPARAMS}

    def with_hparams(self, values: Mapping[str, float]) -> PPOConfig:
        """This config with ``values`` applied (integers rounded; ``net_width`` rescales
        ``net_dims``)."""
        changes: dict[str, Any] = {k: float(values[k]) for k in ("lr", "entropy_coef", "clip", "gamma", "gae_lambda")
                                   if k in values}
        changes.update({k: int(round(values[k])) for k in ("repeat_times", "num_envs") if k in values})
        if "net_width" in values:
            scale = values["net_width"] / self.net_dims[0]
            changes["net_dims"] = tuple(max(1, int(round(d * scale))) for d in self.net_dims)
        return replace(self, **changes)


def mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class Actor(nn.Module):
    """Gaussian policy; the env receives ``tanh`` of the sample, so actions lie in (-1, 1).

    With a ``layout`` the network is a per-stock scorer: it maps each stock's inputs to
    that stock's mean, the same weights for every stock (``policy: shared``).
    """

    def __init__(self, state_dim: int, action_dim: int, net_dims: tuple[int, ...], init_log_std: float,
                 layout: StockLayout | None = None):
        super().__init__()
        self.layout = layout
        self.net = mlp([state_dim, *net_dims, action_dim] if layout is None else [layout.width, *net_dims, 1])
        last = self.net[-1]
        assert isinstance(last, nn.Linear)
        nn.init.orthogonal_(last.weight, gain=0.01)
        nn.init.zeros_(last.bias)
        self.log_std = nn.Parameter(torch.full((action_dim,), init_log_std))

    def mean(self, state: torch.Tensor) -> torch.Tensor:
        """The Gaussian mean of the pre-``tanh`` action, ``[..., action_dim]``."""
        if self.layout is None:
            return self.net(state)
        return self.net(self.layout.per_stock(state)).squeeze(-1)

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        """Deterministic action in (-1, 1): ``tanh`` of the Gaussian mean."""
        return torch.tanh(self.mean(state))

    def distribution(self, state: torch.Tensor) -> torch.distributions.Normal:
        return torch.distributions.Normal(self.mean(state), self.log_std.exp())


class Critic(nn.Module):
    def __init__(self, state_dim: int, net_dims: tuple[int, ...]):
        super().__init__()
        self.net = mlp([state_dim, *net_dims, 1])

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        return self.net(state).squeeze(-1)


@dataclass
class Rollout:
    """Contiguous ``[H, E, ...]`` tensors of one rollout, on the env's device. With
    ``credit: per_stock``, ``log_probs`` and ``advantages`` (the env's credits) are per
    action, ``[H, E, n]``; ``returns`` are the GAE(λ) value targets either way."""

    states: torch.Tensor
    raw_actions: torch.Tensor
    log_probs: torch.Tensor
    rewards: torch.Tensor
    truncated: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor

    def split(self, sizes: list[int]) -> list[Rollout]:
        """The rollouts of consecutive blocks of ``sizes`` envs (a multiplexed population's agents)."""
        parts = [getattr(self, f.name).split(sizes, dim=1) for f in fields(self)]
        return [Rollout(*tensors) for tensors in zip(*parts)]


class Batch(NamedTuple):
    """A rollout flattened to ``[H·E, ...]`` for minibatch sampling."""

    states: torch.Tensor
    raw_actions: torch.Tensor
    log_probs: torch.Tensor
    returns: torch.Tensor
    advantages: torch.Tensor


def gae_advantages(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_value: torch.Tensor,
    truncated: torch.Tensor,
    final_values: torch.Tensor,
    gamma: float | torch.Tensor,
    lam: float | torch.Tensor,
) -> torch.Tensor:
    """GAE(λ) advantages ``[H, E]`` (Schulman et al. 2016) with truncation bootstrapping.

    After a truncated step the env has already reset, so the TD target uses the value of
    the episode's final state (``final_values``) and the λ-recursion stops there. The end
    of data is a truncation, never a terminal state (DESIGN §2).
    """
    advantages = torch.empty_like(rewards)
    gae = torch.zeros_like(next_value)
    for i in reversed(range(rewards.shape[0])):
        following = next_value if i == rewards.shape[0] - 1 else values[i + 1]
        bootstrap = torch.where(truncated[i], final_values[i], following)
        delta = rewards[i] + gamma * bootstrap - values[i]
        gae = delta + gamma * lam * gae * (~truncated[i])
        advantages[i] = gae
    return advantages


def surrogate(
    actor: Actor,
    states: torch.Tensor,
    raw_actions: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    clip: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped policy loss (the negated surrogate objective) and the mean entropy.

    ``raw_actions`` are the pre-``tanh`` Gaussian samples the rollout took; the ratio
    π_new/π_old is computed on them, where the ``tanh`` Jacobian cancels. With per-action
    ``old_log_probs`` and ``advantages`` ``[B, n]`` (``credit: per_stock``) each action has
    its own clipped ratio, and a sample's loss is the sum over its actions.
    """
    dist = actor.distribution(states)
    log_probs = dist.log_prob(raw_actions)
    per_action = old_log_probs.dim() == log_probs.dim()
    if not per_action:
        log_probs = log_probs.sum(-1)
    loss = -clipped((log_probs - old_log_probs).exp(), advantages, clip, per_action).mean()
    return loss, dist.entropy().sum(-1).mean()


def clipped(ratio: torch.Tensor, advantages: torch.Tensor, clip: float | torch.Tensor,
            per_action: bool) -> torch.Tensor:
    """PPO's clipped surrogate ``min(ρA, clip(ρ, 1 − ε, 1 + ε)·A)`` per sample; with
    ``per_action`` the last dimension holds each action's term, and they are summed."""
    surr = torch.minimum(ratio * advantages, ratio.clamp(1 - clip, 1 + clip) * advantages)
    return surr.sum(-1) if per_action else surr


class PPOLearner:
    """One actor-critic learner with its own optimizer and random stream."""

    def __init__(self, state_dim: int, action_dim: int, cfg: PPOConfig, seed: int, device: torch.device,
                 layout: StockLayout | None = None):
        self.cfg, self.device = cfg, device
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.actor = Actor(state_dim, action_dim, cfg.net_dims, cfg.init_log_std, layout).to(device)
            self.critic = Critic(state_dim, cfg.net_dims).to(device)
        self.params = [*self.actor.parameters(), *self.critic.parameters()]
        self.optimizer = torch.optim.Adam(self.params, lr=cfg.lr)
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self._state: torch.Tensor | None = None

    def set_hparams(self, values: Mapping[str, float]) -> None:
        """Apply evolved hyperparameters (the selector's exploration step); the learner's
        network shape stays, so ``net_width`` must be its own."""
        self.cfg = self.cfg.with_hparams(values)
        for group in self.optimizer.param_groups:
            group["lr"] = self.cfg.lr

    def copy_from(self, other: PPOLearner) -> None:
        """Take ``other``'s weights and optimizer state (the selector's exploit step)."""
        self.actor.load_state_dict(other.actor.state_dict())
        self.critic.load_state_dict(other.critic.state_dict())
        # Deep copy: load_state_dict would otherwise share the Adam moment tensors.
        self.optimizer.load_state_dict(copy.deepcopy(other.optimizer.state_dict()))
        self.set_hparams(other.cfg.hparams())

    def state_dict(self) -> dict[str, Any]:
        """Weights, optimizer, hyperparameters, random stream and the env's current state."""
        return {"actor": self.actor.state_dict(), "critic": self.critic.state_dict(),
                "optimizer": self.optimizer.state_dict(), "hparams": self.cfg.hparams(),
                "rng": self.generator.get_state(), "obs": self._state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.actor.load_state_dict(state["actor"])
        self.critic.load_state_dict(state["critic"])
        # Deep copy: Adam would otherwise update the caller's moment tensors in place.
        self.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
        self.set_hparams(state["hparams"])
        self.generator.set_state(state["rng"])
        obs = state["obs"]
        self._state = None if obs is None else obs.to(self.device).clone()

    @torch.no_grad()
    def collect(self, env: MarketEnv) -> Rollout:
        """Step ``env`` for ``horizon`` steps and compute GAE(λ) advantages.

        The env writes each next state straight into the buffer, and nothing in the loop
        reads a value back to the host on CUDA (truncated episodes' final states are valued
        for every env there, then masked).
        """
        h, e = self.cfg.horizon, env.num_envs
        dev = env.device
        states = torch.empty((h + 1, e, env.state_dim), dtype=torch.float32, device=dev)
        raw_actions = torch.empty((h, e, env.action_dim), dtype=torch.float32, device=dev)
        per_stock = self.cfg.credit == "per_stock"
        log_probs = torch.empty((h, e, env.action_dim) if per_stock else (h, e), dtype=torch.float32, device=dev)
        credits = torch.empty((h, e, env.action_dim), dtype=torch.float32, device=dev) if per_stock else None
        rewards = torch.empty((h, e), dtype=torch.float32, device=dev)
        truncated = torch.empty((h, e), dtype=torch.bool, device=dev)
        final_values = torch.zeros((h, e), dtype=torch.float32, device=dev)
        if self._state is None:
            env.reset(out=states[0])
        else:
            states[0] = self._state
        for i in range(h):
            with profiler.operation("inference"):
                dist = self.actor.distribution(states[i])
                raw = dist.mean + dist.stddev * torch.randn(
                    dist.mean.shape, generator=self.generator, device=dev
                )
                raw_actions[i] = raw
                log_probs[i] = dist.log_prob(raw) if per_stock else dist.log_prob(raw).sum(-1)
            with profiler.operation("simulation"):
                step = env.step(torch.tanh(raw), out=states[i + 1],
                                baseline=torch.tanh(dist.mean) if per_stock else None)
            rewards[i], truncated[i] = step.reward, step.truncated
            if credits is not None:
                credits[i] = step.credit
            if len(step.final.index):  # a shape, known on the host: no device sync
                with profiler.operation("inference"):
                    final_values[i].index_copy_(0, step.final.index, self.critic(step.final.states))
        self._state = states[h].clone()
        with profiler.operation("advantage"):
            final_values = torch.where(truncated, final_values, 0.0)
            values = self.critic(states[:h].flatten(0, 1)).reshape(h, e)
            advantages = gae_advantages(rewards, values, self.critic(states[h]), truncated, final_values,
                                        self.cfg.gamma, self.cfg.gae_lambda)
        return Rollout(states[:h], raw_actions, log_probs, rewards, truncated, values,
                       advantages if credits is None else credits, advantages + values)

    def update(self, rollout: Rollout) -> dict[str, float]:
        """``repeat_times`` epochs of minibatch updates on the clipped surrogate objective,
        with the value loss, the entropy bonus, normalised advantages and clipped gradients."""
        cfg = self.cfg
        adv = rollout.advantages.flatten(0, 1)
        batch = Batch(rollout.states.flatten(0, 1), rollout.raw_actions.flatten(0, 1), rollout.log_probs.flatten(0, 1),
                      rollout.returns.flatten(), (adv - adv.mean()) / (adv.std() + 1e-8))
        size = adv.shape[0]
        width = min(cfg.batch_size, size)
        totals = torch.zeros(3, device=self.device)
        steps = 0
        for _ in range(cfg.repeat_times):
            order = torch.randperm(size, generator=self.generator, device=self.device)
            for start in range(0, size - width + 1, width):
                with profiler.operation("backprop"):
                    totals += self._gradient_step(batch, order[start : start + width])
                steps += 1
        means = (totals / max(steps, 1)).tolist()  # one host sync per update
        return dict(zip(("policy_loss", "value_loss", "entropy"), means))

    def _gradient_step(self, batch: Batch, idx: torch.Tensor) -> torch.Tensor:
        """One Adam step on minibatch ``idx``; returns (policy loss, value loss, entropy)."""
        cfg = self.cfg
        states = batch.states[idx]
        policy_loss, entropy = surrogate(self.actor, states, batch.raw_actions[idx], batch.log_probs[idx],
                                         batch.advantages[idx], cfg.clip)
        value_loss = (self.critic(states) - batch.returns[idx]).pow(2).mean()
        loss = policy_loss + cfg.value_coef * value_loss - cfg.entropy_coef * entropy
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm)
        self.optimizer.step()
        return torch.stack((policy_loss, value_loss, entropy)).detach()
