"""More history for the ablations' augmented arms (benchmarks/evidence/ablations.py;
docs/results.md, where the edge was lost): histories of returns traded before the market's
first bar, block-resampled from its own training window or drawn afresh from the embedded
market's generator, and the market stretched back over them with its own bars and windows
untouched."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from benchmarks.common import Market

BLOCK = 63
"""Bars per block of the bootstrap: longer than the latent drift's half-life (23 bars), so a
block keeps the trends the agents learn from."""


def more_history(m: Market, how: str, count: int, seed: int) -> list[np.ndarray]:
    """``count`` histories of ``[bars, n, 2]`` log returns (overnight gap, intraday move) as long as
    ``m``'s warm-up and training window: block-resampled from ``m``'s own training window
    (``bootstrap``: blocks of :data:`BLOCK` bars, every stock's bars together), or drawn afresh
    from the embedded market's generator with other seeds (``generator``)."""
    from tasks.data.synthetic_daily import daily_market

    bars = m.train[1] + m.params.features.warmup
    if how == "generator":
        d = m.params.data
        markets = [daily_market(d.symbols, d.start, d.end, d.signal, 1_000_000 + 1000 * seed + j) for j in range(count)]
        return [np.stack((np.log(k.open[1:bars + 1] / k.close[:bars]),
                          np.log(k.close[1:bars + 1] / k.open[1:bars + 1])), axis=-1) for k in markets]
    close, opens = m.data.close.numpy(), m.data.open.numpy()
    own = np.stack((np.log(opens[1:m.train[1] + 1] / close[:m.train[1]]),
                    np.log(close[1:m.train[1] + 1] / opens[1:m.train[1] + 1])), axis=-1)
    rng = np.random.default_rng(seed)
    blocks = -(-bars // BLOCK)
    return [np.concatenate([own[s : s + BLOCK] for s in rng.integers(0, len(own) - BLOCK, blocks)])[:bars]
            for _ in range(count)]


def augmented(m: Market, histories: list[np.ndarray]) -> Market:
    """``m`` with ``histories`` of returns traded before its first bar, as prices that run on
    from one another into it, and its training window stretched back over them; validation and
    test stay ``m``'s own. The histories' indicators are computed from their own prices (their
    first ``features.warmup`` bars give the history and are dropped) and normalised with ``m``'s
    statistics; ``m``'s own bars keep theirs."""
    from tasks.data.momentum import feature
    from trainers.common.env import MarketData
    from trainers.common.state import normalise_features

    returns = np.concatenate(histories)
    log_close = np.cumsum(returns.sum(axis=-1), axis=0)
    log_open = log_close - returns[..., 1]
    warm = m.params.features.warmup
    shift = np.log(m.data.open[0].numpy()) - log_close[-1]  # the last history closes at the market's first open
    close, opens = np.exp(log_close + shift), np.exp(log_open + shift)
    raw = np.stack([feature(close, name) for name in m.fs.feature_names], axis=-1)[warm:]
    feats = torch.as_tensor(normalise_features(raw, m.fs.mean, m.fs.std))
    data = MarketData(torch.cat((torch.as_tensor(opens[warm:]), m.data.open)),
                      torch.cat((torch.as_tensor(close[warm:]), m.data.close)), torch.cat((feats, m.data.features)))
    extra = len(close) - warm
    return replace(m, data=data, train=(0, m.train[1] + extra), val=(m.val[0] + extra, m.val[1] + extra),
                   test=(m.test[0] + extra, m.test[1] + extra))
