"""Train-only normalisation streamed over row blocks equals the in-memory definition bit for bit."""

import numpy as np
import pytest

from tasks.data import train_stats
from tasks.errors import DataError


@pytest.mark.parametrize("shape", [(300, 4, 3), (250, 1, 1), (250, 1, 3), (250, 5, 1), (97, 30, 10)])
@pytest.mark.parametrize("universe", ["gap-free", "ragged", "listed later"])
@pytest.mark.parametrize("pooled", [False, True])
def test_streamed_statistics_equal_the_in_memory_ones_bit_for_bit(monkeypatch, shape, universe, pooled):
    monkeypatch.setattr(train_stats, "CELLS", 64)  # blocks of a few rows
    rows, n, k = shape
    rng = np.random.default_rng(rows + n + k)
    train = rng.normal(size=shape) * rng.uniform(0.1, 100.0, (n, k)) + rng.uniform(-50, 50, (n, k))
    tradable = np.ones((rows, n), bool) if universe == "gap-free" else rng.random((rows, n)) > 0.3
    if universe == "listed later" and n > 1:
        tradable[:, 0] = False  # takes the pooled statistics
    train = np.where(tradable[..., None], train, np.nan) if universe != "gap-free" else train
    want = train_stats.train_stats(train, tradable, pooled)
    got = train_stats.streamed_stats(lambda a, b: train[a:b].copy(), tradable, k, pooled)
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)


def test_the_statistics_by_hand():
    train = np.array([[[1.0], [10.0]], [[3.0], [np.nan]], [[5.0], [30.0]]])
    tradable = np.array([[True, True], [True, False], [True, True]])
    mean, std = train_stats.train_stats(train, tradable)
    np.testing.assert_allclose(mean[:, 0], [3.0, 20.0])
    np.testing.assert_allclose(std[:, 0], [np.sqrt(8 / 3), 10.0])


def test_pooled_statistics_by_hand_are_one_mean_and_sd_over_every_stocks_cells():
    """One mean and sd per indicator over every tradable train cell, the same for each symbol."""
    train = np.array([[[1.0], [10.0]], [[3.0], [np.nan]], [[5.0], [30.0]]])
    tradable = np.array([[True, True], [True, False], [True, True]])
    mean, std = train_stats.train_stats(train, tradable, pooled=True)
    cells = np.array([1.0, 10.0, 3.0, 5.0, 30.0])  # mean 9.8, sd sqrt(((8.8² + 0.2² + 6.8² + 4.8² + 20.2²) / 5)
    np.testing.assert_allclose(mean[:, 0], [9.8, 9.8])
    np.testing.assert_allclose(std[:, 0], [np.sqrt(((cells - 9.8) ** 2).mean())] * 2)


def test_no_tradable_train_cell_is_a_one_line_error():
    with pytest.raises(DataError, match="no symbol is tradable in the train split"):
        train_stats.streamed_stats(lambda a, b: np.zeros((b - a, 2, 2)), np.zeros((5, 2), bool), 2)
