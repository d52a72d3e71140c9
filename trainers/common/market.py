"""The market an env trades: price, indicator and session panels on one device (docs/training.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from trainers.common.state import StateScales, bar_block


@dataclass
class MarketData:
    """Price and indicator panels on one device.

    ``open`` and ``close`` are ``[T, n]`` float64; ``features`` is ``[T, n, k]`` float32,
    already normalised with :func:`trainers.common.state.normalise_features`; ``turbulence`` is the
    raw ``[T]`` turbulence index the gate reads (``None`` when it was not computed);
    ``tradable`` is ``[T, n]`` bool, false where a stock has no tradable bar (``None``: every
    stock at every bar, the panel has no gaps); ``session_last`` is ``[T]`` bool, true at each
    session's last bar on intraday bars (:func:`trainers.common.sessions.session_last`; ``None`` on
    daily bars, where every bar is a whole session).
    """

    open: torch.Tensor
    close: torch.Tensor
    features: torch.Tensor
    turbulence: torch.Tensor | None = None
    tradable: torch.Tensor | None = None
    session_last: torch.Tensor | None = None
    _rows: dict[StateScales, torch.Tensor] = field(default_factory=dict, repr=False, compare=False)
    _level: torch.Tensor | None = field(default=None, repr=False, compare=False)
    _next_end: torch.Tensor | None = field(default=None, repr=False, compare=False)

    @property
    def n_stocks(self) -> int:
        return int(self.close.shape[1])

    @property
    def n_features(self) -> int:
        return int(self.features.shape[2])

    def to(self, device: torch.device | str) -> MarketData:
        turb, mask, last = (None if x is None else x.to(device) for x in (self.turbulence, self.tradable,
                                                                            self.session_last))
        return MarketData(self.open.to(device), self.close.to(device), self.features.to(device), turb, mask, last)

    def market_growth(self) -> torch.Tensor:
        """``[T − 1]`` log growth of the equal-weight market from close t to close t+1
        (``reward: excess``'s benchmark); in a ragged universe, over the stocks tradable at
        both closes (0 where there are none)."""
        ratio = self.close[1:] / self.close[:-1]
        if self.tradable is None:
            return torch.log(ratio.mean(dim=1))
        both = self.tradable[1:] & self.tradable[:-1]
        mean = torch.where(both, ratio, 0.0).sum(dim=1) / both.sum(dim=1).clamp(min=1)
        return torch.log(torch.where(both.any(dim=1), mean, 1.0))

    def market_growth_between(self, start: torch.Tensor, end: torch.Tensor) -> torch.Tensor:
        """Log growth of the equal-weight market from close ``start`` to close ``end`` (``[E]``
        bars each): the sum of :meth:`market_growth` over a decision's bars, from a cumulative
        sum computed once."""
        if self._level is None:
            growth = self.market_growth()
            self._level = torch.cat((torch.zeros_like(growth[:1]), torch.cumsum(growth, dim=0)))
        return self._level.index_select(0, end) - self._level.index_select(0, start)

    def next_session_end(self) -> torch.Tensor:
        """``[T]`` long: the first session's last bar at or after each bar (T where none),
        computed once (``session_last`` must be set)."""
        if self._next_end is None:
            assert self.session_last is not None
            bars = torch.arange(len(self.session_last), device=self.session_last.device)
            ends = torch.where(self.session_last, bars, len(bars))
            self._next_end = ends.flip(0).cummin(0).values.flip(0)
        return self._next_end

    def state_rows(self, scales: StateScales) -> torch.Tensor:
        """Every bar's state row ``[T, state_dim]`` float32 with the account columns zeroed,
        computed once per ``scales``: a step gathers one row per env and fills in the account,
        instead of rebuilding the bar part (the same values, bit for bit)."""
        if scales not in self._rows:
            bars = bar_block(self.close, self.features, scales, self.tradable)
            account = torch.zeros((bars.shape[0], 1 + self.n_stocks), dtype=bars.dtype, device=bars.device)
            self._rows[scales] = torch.cat((account, bars), dim=1)
        return self._rows[scales]
