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


def ragged_market() -> MarketData:
    """Two stocks over 4 bars. A trades at bars 0-1 and then stops (delisted); B lists at bar 1."""
    close = torch.tensor([[100.0, 50.0], [110.0, 50.0], [110.0, 60.0], [110.0, 70.0]], dtype=torch.float64)
    open_ = torch.tensor([[99.0, 50.0], [105.0, 52.0], [999.0, 58.0], [999.0, 66.0]], dtype=torch.float64)
    feats = torch.tensor([[[1.0], [7.0]], [[2.0], [3.0]], [[9.0], [4.0]], [[9.0], [5.0]]])
    tradable = torch.tensor([[True, False], [True, True], [False, True], [False, True]])
    return MarketData(open=open_, close=close, features=feats, tradable=tradable)


def scales(data: MarketData, cfg: EnvConfig) -> StateScales:
    return StateScales(1 / cfg.initial_cash, 1 / cfg.hmax, tuple(data.close[0].tolist()))
