"""benchmarks/evidence/augment.py: a market stretched back over more histories keeps its own
bars and windows, and each history bar moves as its returns say."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from benchmarks.common import Market
from benchmarks.evidence.augment import augmented
from trainers.common.env import MarketData


@pytest.fixture
def market() -> Market:
    bars, n = 40, 2
    close = torch.tensor(np.exp(np.cumsum(np.full((bars, n), 0.01), axis=0)))
    data = MarketData(close * 0.999, close, torch.zeros(bars, n, 1))
    params = SimpleNamespace(features=SimpleNamespace(warmup=5))
    fs = SimpleNamespace(feature_names=["ret_5"], mean=np.zeros((n, 1)), std=np.ones((n, 1)))
    return Market(params, fs, data, None, (0, 20), (20, 30), (30, 40), 252.0)


def test_more_histories_run_on_into_the_market_which_keeps_its_own_bars_and_windows(market):
    histories = [np.full((25, 2, 2), 0.002), np.full((25, 2, 2), -0.001)]  # [bars, n, (gap, move)]
    m = augmented(market, histories)
    extra = 50 - 5  # the histories' bars less the warm-up their first indicators need
    assert (m.train, m.val, m.test) == ((0, 20 + extra), (20 + extra, 30 + extra), (30 + extra, 40 + extra))
    assert torch.equal(m.data.close[extra:], market.data.close) and torch.equal(m.data.open[extra:], market.data.open)
    assert torch.equal(m.data.features[extra:], market.data.features)
    # the last history bar closes at the market's first open, and each history bar moves as its returns say
    assert math.isclose(float(m.data.close[extra - 1, 0]), float(market.data.open[0, 0]), rel_tol=1e-12)
    assert math.isclose(float(m.data.close[1, 0] / m.data.close[0, 0]), math.exp(0.004), rel_tol=1e-12)
    assert math.isclose(float(m.data.close[-41, 0] / m.data.open[-41, 0]), math.exp(-0.001), rel_tol=1e-12)
