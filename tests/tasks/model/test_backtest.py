import json

import numpy as np
import pandas as pd

from tasks.model.backtest import CURVE_FILE, METRICS_FILE, PLOT_FILE
from trainers.metrics import METRICS


def test_backtest_outputs(built):
    folder = built.dirs.backtest
    metrics = json.loads((folder / METRICS_FILE).read_text())
    assert set(metrics["agent"]) == set(METRICS) == set(metrics["buy_and_hold"])
    assert metrics["start"] > "2021-08-31"  # test window only
    curve = pd.read_csv(folder / CURVE_FILE, index_col=0)
    assert curve.iloc[0].tolist() == [built.env.initial_cash] * 2
    assert np.isclose(curve["agent"].iloc[-1] / curve["agent"].iloc[0] - 1, metrics["agent"]["cumulative_return"])
    assert (folder / PLOT_FILE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
