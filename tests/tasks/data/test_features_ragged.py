"""A ragged universe through the features stage (docs/data.md, ragged universes): no cut to a common start, each
symbol's indicators on its own real bars, the tradable mask, and nothing invented."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from stockstats import wrap

from tasks.data import feature_set, features
from tasks.data.bars import VALIDATED, write_parquet
from tasks.errors import DataError

from ...conftest import tiny_params

T, WARM, MIN_HISTORY = 300, 25, 25
SESSIONS = pd.bdate_range("2020-01-01", periods=T, tz="UTC")
ROWS = {  # symbol -> the session indices it has a bar at
    "A": list(range(T)),
    "B": list(range(100, T)),  # lists late (an IPO at bar 100)
    "C": list(range(0, 201)),  # stops after bar 200 (delisted)
    "D": [150],  # one row in the middle
    "E": [i for i in range(T) if not 160 <= i <= 162],  # a 3-bar halt
}


def closes(symbol: str) -> np.ndarray:
    rng = np.random.default_rng(ord(symbol))
    return 20.0 * np.exp(np.cumsum(rng.normal(0.0, 0.02, T)))


def ragged_bars() -> pd.DataFrame:
    frames = []
    for symbol, rows in ROWS.items():
        c = closes(symbol)[rows]
        frames.append(pd.DataFrame({"symbol": symbol, "ts": SESSIONS[rows], "open": c * 0.99, "high": c * 1.01,
                                    "low": c * 0.98, "close": c, "volume": 1e6}))
    return pd.concat(frames, ignore_index=True)


@pytest.fixture
def ragged(tmp_path: Path) -> feature_set.FeatureSet:
    params = tiny_params(tmp_path, "features.indicators=[ret_5, ret_20_xs, rsi_30]", f"features.warmup={WARM}",
                         f"features.min_history={MIN_HISTORY}", "features.train_end=2020-08-31",
                         "features.val_end=2020-10-31")
    write_parquet(ragged_bars(), params.dirs.validated / VALIDATED, "1d")
    features.features(params)
    return feature_set.load(params.dirs.features)


def row(fs: feature_set.FeatureSet, session: int) -> int:
    """The feature set's row of a session index (the panel's first WARM bars are dropped)."""
    return session - WARM


def test_the_panel_keeps_every_bar_and_drops_only_a_symbol_that_never_trades(ragged):
    assert len(ragged.timestamps) == T - WARM  # not cut to B's listing at bar 100
    assert ragged.symbols == ["A", "B", "C", "E"]
    cover = {c.symbol: c for c in ragged.coverage}
    assert cover["D"].real_bars == 1 and cover["D"].tradable == 0


def test_a_symbol_is_tradable_only_on_real_bars_after_its_own_history(ragged):
    tradable = np.asarray(ragged.tradable)
    b, c, e = (ragged.symbols.index(s) for s in "BCE")
    first_b = 100 + MIN_HISTORY - 1  # its 25th real bar
    assert not tradable[: row(ragged, first_b), b].any() and tradable[row(ragged, first_b) :, b].all()
    assert tradable[: row(ragged, 200) + 1, c].all() and not tradable[row(ragged, 201) :, c].any()
    assert not tradable[row(ragged, 160) : row(ragged, 163), e].any()
    assert tradable[row(ragged, 163), e] and tradable[:, 0].all()
    saved = json.loads((Path(ragged_dir(ragged)) / feature_set.COVERAGE).read_text())
    assert int((~tradable).sum()) == saved["masked_cells"]


def ragged_dir(fs: feature_set.FeatureSet) -> str:
    return str(Path(fs.features.filename).parent)  # memory-mapped from the stage's folder


def test_indicators_run_over_each_symbols_own_real_bars(ragged):
    e = ragged.symbols.index("E")
    own = closes("E")[ROWS["E"]]
    at = ROWS["E"].index(163)  # the first bar after the halt: 5 real bars back is bar 155
    assert ROWS["E"][at - 5] == 155
    got = ragged.features[row(ragged, 163), e, 0]
    assert got == np.float32(np.log(own[at] / own[at - 5]))
    b = ragged.symbols.index("B")
    rows_b = ROWS["B"]
    frame = pd.DataFrame({"open": closes("B")[rows_b] * 0.99, "high": closes("B")[rows_b] * 1.01,
                          "low": closes("B")[rows_b] * 0.98, "close": closes("B")[rows_b], "volume": 1e6})
    rsi = wrap(frame)["rsi_30"].to_numpy()
    np.testing.assert_array_equal(ragged.features[row(ragged, 140) :, b, 2], rsi[40:].astype(np.float32))


def test_untradable_cells_hold_no_invented_numbers_and_the_state_masks_them(ragged):
    tradable = np.asarray(ragged.tradable)
    assert np.isnan(ragged.features[~tradable]).all() and np.isfinite(ragged.features[tradable]).all()
    data = ragged.market()
    assert data.tradable is not None and (data.features.numpy()[~tradable] == 0).all()


def test_normalisation_uses_only_tradable_train_cells(ragged):
    """The stats are fitted on the float64 values the stage saves as float32, hence rel 1e-5."""
    lo, hi = ragged.splits["train"]
    c = ragged.symbols.index("C")
    cells = ragged.features[lo : hi + 1, c, 0][np.asarray(ragged.tradable)[lo : hi + 1, c]].astype(np.float64)
    assert ragged.mean[c, 0] == pytest.approx(cells.mean(), rel=1e-5)
    b = ragged.symbols.index("B")  # B's train bars: from its 25th real bar to the end of train
    cells_b = ragged.features[lo : hi + 1, b, 0][np.asarray(ragged.tradable)[lo : hi + 1, b]].astype(np.float64)
    assert ragged.std[b, 0] == pytest.approx(cells_b.std(), rel=1e-5)


def test_a_universe_with_no_symbol_long_enough_is_a_one_line_error(tmp_path):
    params = tiny_params(tmp_path, "features.indicators=[ret_5]", "features.warmup=5", "features.min_history=400")
    write_parquet(ragged_bars(), params.dirs.validated / VALIDATED, "1d")
    with pytest.raises(DataError, match="no symbol has 400 real bars"):
        features.features(params)
