"""The one state builder, shared by the training environment and live serving.

FinRL's paper-trading code re-typed the env's scaling constants by hand,
so training and serving drifted apart. Here every constant that shapes the state
lives in :class:`StateScales`, is saved next to the policy, and both the env and the
MLflow pyfunc call :func:`build_state` and :func:`normalise_features`.

State (finrl-podracer §3): balance, shares held, closing prices and the technical
indicators of every stock, each scaled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import torch

A = TypeVar("A", np.ndarray, torch.Tensor)

FEATURE_CLIP = 10.0
"""Normalised indicators are clipped to ±FEATURE_CLIP standard deviations."""


@dataclass(frozen=True)
class StateScales:
    """Scaling constants of the state vector; saved with every model."""

    cash_scale: float
    """Multiplies the cash balance (1 / initial cash)."""
    shares_scale: float
    """Multiplies the share counts (1 / hmax)."""
    price_ref: tuple[float, ...]
    """Per-stock reference price (close of the first training bar); prices enter as ratios."""

    @classmethod
    def from_dict(cls, raw: dict[str, object]) -> StateScales:
        return cls(
            cash_scale=float(raw["cash_scale"]),  # type: ignore[arg-type]
            shares_scale=float(raw["shares_scale"]),  # type: ignore[arg-type]
            price_ref=tuple(float(p) for p in raw["price_ref"]),  # type: ignore[union-attr]
        )


@dataclass(frozen=True)
class StockLayout:
    """Where each stock's numbers sit in the flat state, for a policy shared across stocks.

    A per-stock scorer (the EIIE idea of Jiang et al. 2017: one small network applied to
    every asset) sees stock i's normalised indicators, its weight in the account and the
    cash weight, never the price level or the stock's position in the vector, so it cannot
    learn which stock is which and every stock's bars train the same weights.
    """

    n_stocks: int
    n_features: int
    scales: StateScales
    _price_refs: dict[tuple[torch.device, torch.dtype], torch.Tensor] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False)

    @property
    def width(self) -> int:
        """Inputs per stock: k indicators, the stock's weight and the cash weight."""
        return self.n_features + 2

    def per_stock(self, state: torch.Tensor, price_ref: torch.Tensor | None = None) -> torch.Tensor:
        """``[..., S]`` flat states to ``[..., n, k + 2]`` per-stock inputs (float32).

        Weights are holdings marked at the state's closes over the account value, both
        rebuilt from the scaled state with the saved constants. ``price_ref`` is
        :meth:`price_ref_on` the state's device (by default looked up here; a compiled step
        passes its own).
        """
        n, k, sc = self.n_stocks, self.n_features, self.scales
        if price_ref is None:
            price_ref = self.price_ref_on(state.device, state.dtype)
        cash = state[..., :1] / sc.cash_scale
        held = state[..., 1 : 1 + n] / sc.shares_scale * state[..., 1 + n : 1 + 2 * n] * price_ref
        value = (cash + held.sum(-1, keepdim=True)).clamp(min=1e-9)
        feats = state[..., 1 + 2 * n :].unflatten(-1, (n, k))
        weights = (held / value).unsqueeze(-1)
        cash_weight = (cash / value).unsqueeze(-1).expand(*weights.shape)
        return torch.cat((feats, weights, cash_weight), dim=-1)


    def price_ref_on(self, device: torch.device, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The saved reference prices as a tensor on ``device``, made once per device: built
        from the host's numbers on every call, it would be a host-to-device copy each time."""
        key = (device, dtype)
        if key not in self._price_refs:
            self._price_refs[key] = torch.as_tensor(self.scales.price_ref, dtype=dtype, device=device)
        return self._price_refs[key]


def state_dim(n_stocks: int, n_features: int) -> int:
    """Length of the state vector: 1 cash + n shares + n prices + n·k indicators."""
    return 1 + 2 * n_stocks + n_stocks * n_features


def normalise_features(raw: A, mean: A, std: A) -> A:
    """Z-score indicators with train-window statistics and clip them (float32).

    ``raw`` is ``[..., n, k]``; ``mean`` and ``std`` are ``[n, k]`` and were fitted on the
    training split only (docs/data.md, Contracts). numpy arrays, or torch tensors (on any
    device; benchmarks/gpu_market.py builds its market on the GPU).
    """
    if isinstance(raw, torch.Tensor):
        z = (raw.to(torch.float64) - mean) / std
        return z.clamp(-FEATURE_CLIP, FEATURE_CLIP).to(torch.float32)
    z = (raw.astype(np.float64) - mean) / std
    return np.clip(z, -FEATURE_CLIP, FEATURE_CLIP).astype(np.float32)


def account_block(cash: torch.Tensor, shares: torch.Tensor, scales: StateScales) -> torch.Tensor:
    """The account part of the state, ``[E, 1 + n]`` float32: scaled cash and share counts."""
    parts = ((cash * scales.cash_scale).unsqueeze(1), shares * scales.shares_scale)
    return torch.cat(parts, dim=1).to(torch.float32)


def bar_block(close: torch.Tensor, features: torch.Tensor, scales: StateScales,
              tradable: torch.Tensor | None = None) -> torch.Tensor:
    """The bar part of the state, ``[..., n + n·k]`` float32: closes relative to ``price_ref``
    and the normalised indicators. It depends only on the bar, so the env computes it once.

    Where ``tradable`` (``[..., n]`` bool) is false the stock's price and indicators are 0:
    a symbol with no real bar shows the policy nothing, never an invented number (docs/data.md, Ragged universes).
    """
    price_ref = torch.as_tensor(scales.price_ref, dtype=close.dtype, device=close.device)
    prices = (close / price_ref).to(torch.float32)
    if tradable is not None:
        prices = torch.where(tradable, prices, 0.0)
        features = torch.where(tradable.unsqueeze(-1), features, 0.0)
    return torch.cat((prices, features.reshape(*features.shape[:-2], -1).to(torch.float32)), dim=-1)


def build_state(
    cash: torch.Tensor,
    shares: torch.Tensor,
    close: torch.Tensor,
    features: torch.Tensor,
    scales: StateScales,
    tradable: torch.Tensor | None = None,
) -> torch.Tensor:
    """Batch of float32 states ``[E, state_dim]``: ``[cash, shares, prices, indicators]``.

    Args:
        cash: ``[E]`` balance.
        shares: ``[E, n]`` integer share counts (any float dtype).
        close: ``[E, n]`` closing prices of the bar the agent has just seen.
        features: ``[E, n, k]`` normalised indicators of that bar.
        scales: the saved scaling constants.
        tradable: ``[E, n]`` bool, false where the stock has no tradable bar (masked).
    """
    return torch.cat((account_block(cash, shares, scales), bar_block(close, features, scales, tradable)), dim=1)
