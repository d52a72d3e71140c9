"""Proximal Policy Optimization (Schulman et al. 2017), as used by finrl-podracer.txt §5.

Owned here rather than taken from a library (DESIGN §3: API churn). Defaults follow
finrl-podracer.txt Table 3: Adam, lr 2^-14, γ 0.99, batch 2^10, repeat 2^3, buffer 2^12
(``num_envs × horizon``), ratio clip 0.25, entropy 0.02.

The rollout buffer is a set of contiguous tensors on the env's device (§4.4, "replay
buffer on GPU"); truncated episodes bootstrap their value (DESIGN §2, end of data).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace

import torch
from torch import nn

from trainers._checks import require
from trainers.env import MarketEnv

HPARAMS = ("lr", "entropy_coef", "clip", "gamma", "gae_lambda")
"""Hyperparameters that may differ between agents of a population and be evolved."""


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

    def hparams(self) -> dict[str, float]:
        """The evolvable hyperparameters as a plain dict."""
        return {name: float(getattr(self, name)) for name in HPARAMS}

    def with_hparams(self, values: dict[str, float]) -> PPOConfig:
        return replace(self, **{k: values[k] for k in HPARAMS if k in values})


def mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class Actor(nn.Module):
    """Gaussian policy; the env receives ``tanh`` of the sample, so actions lie in (-1, 1)."""

    def __init__(self, state_dim: int, action_dim: int, net_dims: tuple[int, ...], init_log_std: float):
        super().__init__()
        self.net = mlp([state_dim, *net_dims, action_dim])
        last = self.net[-1]
        assert isinstance(last, nn.Linear)
        nn.init.orthogonal_(last.weight, gain=0.01)
        nn.init.zeros_(last.bias)
        self.log_std = nn.Parameter(torch.full((action_dim,), init_log_std))

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        """Deterministic action in (-1, 1): ``tanh`` of the Gaussian mean."""
        return torch.tanh(self.net(state))

    def distribution(self, state: torch.Tensor) -> torch.distributions.Normal:
        return torch.distributions.Normal(self.net(state), self.log_std.exp())


class Critic(nn.Module):
    def __init__(self, state_dim: int, net_dims: tuple[int, ...]):
        super().__init__()
        self.net = mlp([state_dim, *net_dims, 1])

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        return self.net(state).squeeze(-1)


@dataclass
class Rollout:
    """Contiguous ``[H, E, ...]`` tensors of one rollout, on the env's device."""

    states: torch.Tensor
    raw_actions: torch.Tensor
    log_probs: torch.Tensor
    rewards: torch.Tensor
    truncated: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor


def gae_advantages(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_value: torch.Tensor,
    truncated: torch.Tensor,
    final_values: torch.Tensor,
    gamma: float,
    lam: float,
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


class PPOAgent:
    """One actor-critic learner with its own optimizer and random stream."""

    def __init__(self, state_dim: int, action_dim: int, cfg: PPOConfig, seed: int, device: torch.device):
        self.cfg, self.device = cfg, device
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.actor = Actor(state_dim, action_dim, cfg.net_dims, cfg.init_log_std).to(device)
            self.critic = Critic(state_dim, cfg.net_dims).to(device)
        self.optimizer = torch.optim.Adam(
            [*self.actor.parameters(), *self.critic.parameters()], lr=cfg.lr
        )
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self._state: torch.Tensor | None = None

    def set_hparams(self, values: dict[str, float]) -> None:
        """Apply evolved hyperparameters (the selector's exploration step)."""
        self.cfg = self.cfg.with_hparams(values)
        for group in self.optimizer.param_groups:
            group["lr"] = self.cfg.lr

    def copy_from(self, other: PPOAgent) -> None:
        """Take ``other``'s weights and optimizer state (the selector's exploit step)."""
        self.actor.load_state_dict(other.actor.state_dict())
        self.critic.load_state_dict(other.critic.state_dict())
        # Deep copy: load_state_dict would otherwise share the Adam moment tensors.
        self.optimizer.load_state_dict(copy.deepcopy(other.optimizer.state_dict()))
        self.set_hparams(other.cfg.hparams())

    @torch.no_grad()
    def collect(self, env: MarketEnv) -> Rollout:
        """Step ``env`` for ``horizon`` steps and compute GAE(λ) advantages."""
        h, e = self.cfg.horizon, env.num_envs
        dev = env.device
        states = torch.empty((h, e, env.state_dim), dtype=torch.float32, device=dev)
        raw_actions = torch.empty((h, e, env.action_dim), dtype=torch.float32, device=dev)
        log_probs = torch.empty((h, e), dtype=torch.float32, device=dev)
        rewards = torch.empty((h, e), dtype=torch.float32, device=dev)
        truncated = torch.empty((h, e), dtype=torch.bool, device=dev)
        final_values = torch.zeros((h, e), dtype=torch.float32, device=dev)
        state = env.reset() if self._state is None else self._state
        for i in range(h):
            dist = self.actor.distribution(state)
            raw = dist.mean + dist.stddev * torch.randn(
                dist.mean.shape, generator=self.generator, device=dev
            )
            states[i], raw_actions[i] = state, raw
            log_probs[i] = dist.log_prob(raw).sum(-1)
            state, rewards[i], truncated[i], final_state = env.step(torch.tanh(raw))
            if bool(truncated[i].any()):
                final_values[i] = torch.where(truncated[i], self.critic(final_state), 0.0)
        self._state = state
        values = self.critic(states.reshape(h * e, -1)).reshape(h, e)
        advantages = gae_advantages(rewards, values, self.critic(state), truncated, final_values,
                                    self.cfg.gamma, self.cfg.gae_lambda)
        return Rollout(states, raw_actions, log_probs, rewards, truncated, values, advantages, advantages + values)

    def update(self, rollout: Rollout) -> dict[str, float]:
        """``repeat_times`` epochs of minibatch updates on the clipped surrogate objective."""
        cfg = self.cfg
        states = rollout.states.flatten(0, 1)
        raw_actions = rollout.raw_actions.flatten(0, 1)
        old_log_probs = rollout.log_probs.flatten()
        returns = rollout.returns.flatten()
        adv = rollout.advantages.flatten()
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        size = states.shape[0]
        batch = min(cfg.batch_size, size)
        params = [*self.actor.parameters(), *self.critic.parameters()]
        totals = torch.zeros(3, device=self.device)
        steps = 0
        for _ in range(cfg.repeat_times):
            order = torch.randperm(size, generator=self.generator, device=self.device)
            for start in range(0, size - batch + 1, batch):
                idx = order[start : start + batch]
                dist = self.actor.distribution(states[idx])
                log_prob = dist.log_prob(raw_actions[idx]).sum(-1)
                ratio = (log_prob - old_log_probs[idx]).exp()
                surrogate = torch.minimum(
                    ratio * adv[idx], ratio.clamp(1 - cfg.clip, 1 + cfg.clip) * adv[idx]
                )
                policy_loss = -surrogate.mean()
                value_loss = (self.critic(states[idx]) - returns[idx]).pow(2).mean()
                entropy = dist.entropy().sum(-1).mean()
                loss = policy_loss + cfg.value_coef * value_loss - cfg.entropy_coef * entropy
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
                self.optimizer.step()
                totals += torch.stack((policy_loss, value_loss, entropy)).detach()
                steps += 1
        means = (totals / max(steps, 1)).tolist()  # one host sync per update
        return dict(zip(("policy_loss", "value_loss", "entropy"), means))

