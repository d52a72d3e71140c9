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

START_SCALE = 0.1
"""A started scorer's mean is ``0.1 x`` of its (normalised, about unit-sd) input: ``tanh`` is then
close to linear, so the env's cross-sectional z-score of the action (``env.tilt``) is the input's own
and the start trades as the rule does. At scale 1 tanh flattens the extremes, and on development
seed 100 the start earned +0.62 over buy-and-hold on test against the rule's +0.97 (0.1: +0.96)."""


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
                 layout: StockLayout | None = None, start_ranked_by: int | None = None):
        super().__init__()
        self.layout = layout
        self.net = mlp([state_dim, *net_dims, action_dim] if layout is None else [layout.width, *net_dims, 1])
        last = self.net[-1]
        assert isinstance(last, nn.Linear)
        nn.init.orthogonal_(last.weight, gain=0.01)
        nn.init.zeros_(last.bias)
        self.log_std = nn.Parameter(torch.full((action_dim,), init_log_std))
        if start_ranked_by is not None:
            self._start_ranked_by(start_ranked_by)

    def _start_ranked_by(self, index: int) -> None:
        """Set two hidden units to ReLU(x) and ReLU(−x) of per-stock input ``index`` and the output to
        :data:`START_SCALE` times their difference, so the mean is 0.1 x plus the other units' small
        random part: the scorer starts as the ranking by that input (``ppo.start_ranked_by``,
        docs/training.md)."""
        first, last = self.net[0], self.net[-1]
        if self.layout is None or len(self.net) != 3 or first.out_features < 2:
            raise ValueError("start_ranked_by needs a per-stock scorer with one hidden layer of at least 2 units")
        if not 0 <= index < self.layout.n_features:
            raise ValueError(f"start_ranked_by: input {index} is not one of the scorer's "
                             f"{self.layout.n_features} indicators")
        with torch.no_grad():
            first.weight[:2] = 0.0
            first.weight[0, index], first.weight[1, index] = 1.0, -1.0
            first.bias[:2] = 0.0
            last.weight[0, :2] = torch.tensor([START_SCALE, -START_SCALE])

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


def new_actor(shape: ActorShape, net_dims: Sequence[int], init_log_std: float = 0.0,
              start_ranked_by: int | None = None) -> Actor:
    """An actor of ``shape`` with hidden layers ``net_dims``, initialised from torch's global
    random stream (a caller that needs given weights seeds it first, or loads a state dict);
    with ``start_ranked_by``, a scorer that starts as the ranking by that input."""
    return Actor(shape.state_dim, shape.n_stocks, tuple(net_dims), init_log_std, shape.layout, start_ranked_by)


class Critic(nn.Module):
    def __init__(self, state_dim: int, net_dims: tuple[int, ...]):
        super().__init__()
        self.net = mlp([state_dim, *net_dims, 1])

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        return self.net(state).squeeze(-1)
