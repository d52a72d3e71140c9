"""The actor and critic networks (finrl-podracer §5: an MLP policy and value function).

An :class:`Actor` is also the served policy (``tasks/model/bundle.py``): its deterministic
action is ``tanh`` of the Gaussian mean. Every actor, a learner's fresh one and a saved
policy's blank one alike, is built by :func:`new_actor` from its :class:`ActorShape`.
Training stacks the actors and critics of a population into one batched model
(:class:`trainers.ppo.batched.BatchedNets`) and writes the trained weights back into these
modules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from trainers.common.state import StateScales, StockLayout, state_dim


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


@dataclass(frozen=True)
class ActorShape:
    """What an actor's weights' shapes depend on besides its hidden layers: the state's length,
    one action per stock, and with ``policy: shared`` the stock layout of its per-stock scorer."""

    state_dim: int
    n_stocks: int
    layout: StockLayout | None = None

    @classmethod
    def of(cls, n_stocks: int, n_features: int, scales: StateScales, policy: str = "mlp") -> ActorShape:
        """The shape of a ``policy`` (``mlp`` or ``shared``) over ``n_stocks`` stocks of ``n_features`` indicators."""
        layout = StockLayout(n_stocks, n_features, scales) if policy == "shared" else None
        return cls(state_dim(n_stocks, n_features), n_stocks, layout)


def new_actor(shape: ActorShape, net_dims: Sequence[int], init_log_std: float = 0.0) -> Actor:
    """An actor of ``shape`` with hidden layers ``net_dims``, initialised from torch's global
    random stream (a caller that needs given weights seeds it first, or loads a state dict)."""
    return Actor(shape.state_dim, shape.n_stocks, tuple(net_dims), init_log_std, shape.layout)


class Critic(nn.Module):
    def __init__(self, state_dim: int, net_dims: tuple[int, ...]):
        super().__init__()
        self.net = mlp([state_dim, *net_dims, 1])

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        return self.net(state).squeeze(-1)
