"""The device script's market (benchmarks/perf/gpu.py): 1-minute bars of a NASDAQ-100-sized
universe, made by torch and numpy alone, since the GPU machine has no pandas pipeline.

It has the shape of ``params.paper.yaml``'s market (100 stocks, 2,520 sessions of 390
minutes, 8 years to train on, then a validation year and a test year) and the traits the
embedded market has (docs/data.md): a market factor with betas 0.6-1.4, idiosyncratic
volatility 1.0-2.2% a day, volatility that clusters from day to day, a U-shaped intraday
volatility profile, overnight gaps, and a learnable part: each stock's daily drift is a
persistent AR(1) process (``signal`` scales it; 0 leaves every stock driftless).

The random numbers come from one seeded CPU generator, so a CPU and a GPU machine build
the same market (to float rounding); the arithmetic then runs on the device. Indicators (docs/data.md: scale
free, cross-sectional): the log price's distance from its mean over the last day and the
last week, each less the day's cross-sectional mean, and the last day's volatility of
minute returns; z-scored with train-window statistics pooled over the stocks
(:func:`trainers.common.state.normalise_features`), as `features.normalise: pooled` does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from trainers.common.env import MarketData
from trainers.common.state import normalise_features

SESSION = 390
"""Minutes per session (half days are not modelled here)."""
FEATURES = ("trend_1d_xs", "trend_5d_xs", "vol_1d")
WINDOWS = (SESSION, 5 * SESSION)


@dataclass(frozen=True)
class Market:
    data: MarketData
    windows: dict[str, tuple[int, int]]
    """Env windows of ``train``, ``validation`` and ``test`` (each starts at the bar before its split)."""
    per_year: float
    stocks: int
    sessions: int


def minute_market(stocks: int = 100, sessions: int = 2520, seed: int = 0, signal: float = 1.0,
                  device: str | torch.device = "cpu") -> Market:
    """The market; the last tenth of the sessions (a year of 10) is the test split, the tenth
    before it validation, the rest (after the indicators' warm-up) train."""
    test_sessions = sessions // 10
    g, dev = torch.Generator().manual_seed(seed), torch.device(device)
    n, t = stocks, sessions * SESSION
    beta = (0.6 + 0.8 * torch.rand(n, generator=g, dtype=torch.float64)).to(dev)
    idio = (0.010 + 0.012 * torch.rand(n, generator=g, dtype=torch.float64)).to(dev)
    level = torch.zeros(sessions, dtype=torch.float64)  # log volatility regime, AR(1) across days
    shocks = torch.randn(sessions, generator=g, dtype=torch.float64)
    drift_shocks = torch.randn(sessions, n, generator=g, dtype=torch.float64)
    drift = torch.zeros(sessions, n, dtype=torch.float64)
    for d in range(1, sessions):
        level[d] = 0.97 * level[d - 1] + 0.08 * shocks[d]
        drift[d] = 0.98 * drift[d - 1] + math.sqrt(1 - 0.98**2) * drift_shocks[d]
    vol = torch.exp(level - level.var() / 2).to(dev)  # [D] daily volatility multiplier, mean about 1
    drift = drift.to(dev)
    u = (torch.arange(SESSION, dtype=torch.float64, device=dev) + 0.5) / SESSION
    profile = 1.0 + 1.5 * (2 * u - 1) ** 2
    profile = profile / profile.pow(2).mean().sqrt()  # [390]: the day's variance is kept
    day_sd = vol.repeat_interleave(SESSION) * profile.repeat(sessions) / math.sqrt(SESSION)  # [T]
    market = 0.010 * day_sd * _normal(g, (t,), dev)
    minute = beta * market.unsqueeze(1) + idio * day_sd.unsqueeze(1) * _normal(g, (t, n), dev)
    del market
    minute += (signal * 0.001 / SESSION) * drift.repeat_interleave(SESSION, dim=0)
    gap = 0.3 * (0.010 * beta + idio) * vol.unsqueeze(1) * _normal(g, (sessions, n), dev)
    log_close = torch.cumsum(minute, 0)
    log_open = log_close - minute  # the open of each minute: the previous close ...
    del minute
    gaps = torch.zeros_like(log_open)
    gaps[::SESSION] = gap
    gaps = torch.cumsum(gaps, 0)  # ... after each overnight gap
    log_open += gaps
    log_close += gaps
    del gaps
    close = 50.0 * torch.exp(log_close)
    open_ = 50.0 * torch.exp(log_open)
    del log_open
    warmup = max(WINDOWS)
    test_lo = t - test_sessions * SESSION
    val_lo = test_lo - test_sessions * SESSION
    splits = {"train": (warmup, val_lo - 1), "validation": (val_lo, test_lo - 1), "test": (test_lo, t - 1)}
    raw = indicators(log_close)
    del log_close
    lo, hi = splits["train"]
    train = raw[lo : hi + 1].flatten(0, 1)  # pooled over every stock, as params.paper.yaml's features.normalise
    mean, std = train.mean(0).expand(raw.shape[1:]), train.std(0).clip(min=1e-12).expand(raw.shape[1:])
    feats = normalise_features(raw[warmup:], mean, std)
    del raw
    shift = {name: (max(a - warmup - 1, 0), b - warmup) for name, (a, b) in splits.items()}
    data = MarketData(open=open_[warmup:].contiguous(), close=close[warmup:].contiguous(), features=feats)
    return Market(data, shift, 252.0 * SESSION, stocks, sessions)


def _normal(g: torch.Generator, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """Standard normal draws of ``shape`` from the CPU generator ``g``, as float64 on ``device``."""
    return torch.randn(shape, generator=g).to(device, torch.float64)


def indicators(log_close: torch.Tensor) -> torch.Tensor:
    """``[T, n, 3]`` float64 raw indicators of :data:`FEATURES` (expanding windows before a full one)."""
    trends = [log_close - _rolling_mean(log_close, w) for w in WINDOWS]
    trends = [x - x.mean(dim=1, keepdim=True) for x in trends]
    returns = torch.diff(log_close, dim=0, prepend=log_close[:1])
    vol = (_rolling_mean(returns.pow(2), WINDOWS[0]) - _rolling_mean(returns, WINDOWS[0]).pow(2)).clamp(min=0).sqrt()
    return torch.stack((*trends, vol), dim=-1)


def _rolling_mean(x: torch.Tensor, window: int) -> torch.Tensor:
    """Mean of the last ``window`` rows (all rows so far before there are ``window``)."""
    total = torch.cumsum(x, 0)
    count = torch.clamp(torch.arange(1, len(x) + 1, dtype=x.dtype, device=x.device), max=window).unsqueeze(1)
    lagged = torch.cat((torch.zeros((window, *x.shape[1:]), dtype=x.dtype, device=x.device), total[:-window]))
    return (total - lagged) / count


def sample_market(stocks: int, bars: int, seed: int, device: str | torch.device) -> MarketData:
    """A plain random-walk market of ``bars`` bars for throughput measurements (what the
    prices are does not change the work a step does)."""
    g = torch.Generator().manual_seed(seed)
    close = 50 * torch.exp(torch.cumsum(0.001 * torch.randn(bars, stocks, generator=g, dtype=torch.float64), 0))
    open_ = close * torch.exp(0.0005 * torch.randn(bars, stocks, generator=g, dtype=torch.float64))
    feats = torch.randn(bars, stocks, len(FEATURES), generator=g).clamp(-10, 10)
    return MarketData(open=open_, close=close, features=feats).to(device)
