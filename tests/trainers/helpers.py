"""Small hand-made markets for trainer tests."""

import torch

from trainers.env import EnvConfig, MarketData
from trainers.state import StateScales


def market(t: int = 40, n: int = 3, k: int = 2, seed: int = 0) -> MarketData:
    g = torch.Generator().manual_seed(seed)
    close = 50 * torch.exp(torch.cumsum(0.02 * torch.randn(t, n, generator=g, dtype=torch.float64), 0))
    open_ = close * torch.exp(0.01 * torch.randn(t, n, generator=g, dtype=torch.float64))
    feats = torch.randn(t, n, k, generator=g)
    return MarketData(open=open_, close=close, features=feats)


def scales(data: MarketData, cfg: EnvConfig) -> StateScales:
    return StateScales(1 / cfg.initial_cash, 1 / cfg.hmax, tuple(data.close[0].tolist()))
