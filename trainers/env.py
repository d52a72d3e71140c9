"""Vectorised stock-trading environment (finrl-podracer.txt §3 eq. 1–4, §4.4).

E independent sub-environments are stepped as one batch of tensors on CPU or CUDA;
there is no Python loop over environments or stocks inside :meth:`MarketEnv.step`.

MDP rules (DESIGN §2):

* the agent sees bar t (close and indicators) and its orders fill at bar t+1's **open**;
* sells execute before buys, shares are integers ≥ 0 and cash never goes below 0;
* ``cost_pct`` is charged on every traded notional;
* the reward is the change of account value from close t to close t+1, after costs;
* the end of an episode (horizon or end of data) is a truncation, never a terminal state.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainers._checks import require
from trainers.state import StateScales, build_state, state_dim


@dataclass(frozen=True)
class EnvConfig:
    """Trading constants of the MDP; saved with every model so serving uses the same."""

    __pydantic_config__ = {"extra": "forbid"}

    initial_cash: float = 1_000_000.0
    hmax: int = 100
    """Largest trade per stock per bar, in shares (paper §3: k ≤ h_max)."""
    cost_pct: float = 0.002
    """Transaction cost as a fraction of traded notional (0.2%, paper Fig. 4)."""
    reward_scale: float = 1e-4
    """Multiplies the change of account value to give the reward."""
    episode_len: int = 256
    """Bars per training episode; episodes also end (truncate) at the end of data."""

    def __post_init__(self) -> None:
        require(self.initial_cash > 0, "initial_cash must be > 0")
        require(self.hmax >= 1, "hmax must be >= 1")
        require(0 <= self.cost_pct < 0.5, "cost_pct must be in [0, 0.5)")
        require(self.reward_scale > 0, "reward_scale must be > 0")
        require(self.episode_len >= 2, "episode_len must be >= 2")


@dataclass
class MarketData:
    """Price and indicator panels on one device.

    ``open`` and ``close`` are ``[T, n]`` float64; ``features`` is ``[T, n, k]`` float32,
    already normalised with :func:`trainers.state.normalise_features`.
    """

    open: torch.Tensor
    close: torch.Tensor
    features: torch.Tensor

    @property
    def n_stocks(self) -> int:
        return int(self.close.shape[1])

    @property
    def n_features(self) -> int:
        return int(self.features.shape[2])

    def to(self, device: torch.device | str) -> MarketData:
        return MarketData(self.open.to(device), self.close.to(device), self.features.to(device))


@dataclass
class Fill:
    """Result of :func:`execute_orders` for a batch of accounts."""

    cash: torch.Tensor
    shares: torch.Tensor
    sold: torch.Tensor
    bought: torch.Tensor
    cost: torch.Tensor


def execute_orders(
    action: torch.Tensor,
    cash: torch.Tensor,
    shares: torch.Tensor,
    price: torch.Tensor,
    hmax: int,
    cost_pct: float,
) -> Fill:
    """Turn actions in [-1, 1]^n into integer trades at ``price`` (eq. 3–4).

    Sells come first and their proceeds fund the buys. When the buys cost more than the
    cash available, every buy is scaled down by the same ratio and rounded down to whole
    shares, which keeps cash ≥ 0 without a sequential loop over stocks.
    Live delivery uses this same function, so paper orders follow the training rules.
    """
    want = torch.trunc(action.clamp(-1.0, 1.0).to(price.dtype) * hmax)
    sold = torch.minimum((-want).clamp(min=0.0), shares)
    proceeds = (sold * price).sum(dim=1)
    cost = proceeds * cost_pct
    cash = cash + proceeds - cost

    bought = want.clamp(min=0.0)
    need = (bought * price).sum(dim=1) * (1.0 + cost_pct)
    ratio = torch.where(need > cash, cash / need.clamp(min=1e-12), torch.ones_like(cash))
    bought = torch.floor(bought * ratio.unsqueeze(1))
    spend = (bought * price).sum(dim=1)
    cost = cost + spend * cost_pct
    cash = (cash - spend * (1.0 + cost_pct)).clamp(min=0.0)
    return Fill(cash=cash, shares=shares - sold + bought, sold=sold, bought=bought, cost=cost)


class MarketEnv:
    """E parallel accounts trading n stocks over the bars ``[t_lo, t_hi]`` of ``data``.

    With ``random_start`` each sub-environment starts at a random bar and runs for
    ``episode_len`` bars (fewer at the end of data); finished sub-environments are reset
    inside :meth:`step`. Without it, all start at ``t_lo`` and run once to ``t_hi``, with no
    reset (validation and backtests).
    """

    def __init__(
        self,
        data: MarketData,
        scales: StateScales,
        cfg: EnvConfig,
        num_envs: int,
        window: tuple[int, int],
        *,
        random_start: bool = True,
        seed: int = 0,
    ) -> None:
        t_lo, t_hi = window
        require(0 <= t_lo < t_hi < data.close.shape[0], f"bad env window {window}")
        self.data, self.scales, self.cfg = data, scales, cfg
        self.num_envs, self.t_lo, self.t_hi = num_envs, t_lo, t_hi
        self.random_start = random_start
        self.device = data.close.device
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        e, n = num_envs, data.n_stocks
        self.cash = torch.full((e,), cfg.initial_cash, dtype=torch.float64, device=self.device)
        self.shares = torch.zeros((e, n), dtype=torch.float64, device=self.device)
        self.t = torch.full((e,), t_lo, dtype=torch.long, device=self.device)
        self.t_end = torch.full((e,), t_hi, dtype=torch.long, device=self.device)

    @property
    def state_dim(self) -> int:
        return state_dim(self.data.n_stocks, self.data.n_features)

    @property
    def action_dim(self) -> int:
        return self.data.n_stocks

    def account_value(self) -> torch.Tensor:
        """Cash plus holdings marked at the current bar's close, ``[E]``."""
        return self.cash + (self.shares * self.data.close[self.t]).sum(dim=1)

    def observe(self) -> torch.Tensor:
        """States ``[E, state_dim]`` for the bar each sub-environment is at."""
        return build_state(
            self.cash, self.shares, self.data.close[self.t], self.data.features[self.t], self.scales
        )

    def reset(self) -> torch.Tensor:
        """Reset every sub-environment and return the first states."""
        self._reset_where(torch.ones(self.num_envs, dtype=torch.bool, device=self.device))
        return self.observe()

    def _reset_where(self, mask: torch.Tensor) -> None:
        self.cash = torch.where(mask, torch.full_like(self.cash, self.cfg.initial_cash), self.cash)
        self.shares = torch.where(mask.unsqueeze(1), torch.zeros_like(self.shares), self.shares)
        if self.random_start:
            span = self.t_hi - self.t_lo  # a start must leave at least one step
            start = self.t_lo + torch.randint(
                0, span, (self.num_envs,), generator=self.generator, device=self.device
            )
            end = torch.clamp(start + self.cfg.episode_len, max=self.t_hi)
        else:
            start = torch.full_like(self.t, self.t_lo)
            end = torch.full_like(self.t, self.t_hi)
        self.t = torch.where(mask, start, self.t)
        self.t_end = torch.where(mask, end, self.t_end)

    def step(
        self, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Advance every sub-environment by one bar.

        Returns ``(state, reward, truncated, final_state)``: ``state`` is the next state
        (already the first state of a new episode where ``truncated``), ``reward`` is float32
        ``[E]``, and ``final_state`` holds the last state of each truncated episode so the
        learner can bootstrap its value.
        """
        value_before = self.account_value()
        t_next = self.t + 1
        fill = execute_orders(
            action, self.cash, self.shares, self.data.open[t_next], self.cfg.hmax, self.cfg.cost_pct
        )
        self.cash, self.shares, self.t = fill.cash, fill.shares, t_next
        reward = ((self.account_value() - value_before) * self.cfg.reward_scale).to(torch.float32)
        truncated = self.t >= self.t_end
        final_state = self.observe()
        if self.random_start and bool(truncated.any()):
            self._reset_where(truncated)
            state = self.observe()
        else:
            state = final_state
        return state, reward, truncated, final_state
