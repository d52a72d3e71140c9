"""The bars contract's coercion (``tasks/data/bars.py``), on hand-made frames."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tasks.data.bars import to_contract


def test_a_missing_symbol_stays_missing_and_other_symbols_become_text():
    """docs/data.md: an empty cell is a missing value, which validation quarantines as
    "null symbol"; as the text 'nan' or 'None' it would be a ticker of its own."""
    frame = pd.DataFrame({"symbol": ["AAA", None, np.nan, 7], "ts": pd.Timestamp("2021-01-04", tz="UTC"),
                          "open": 1.0, "high": 1.0, "low": 1.0, "close": 1.0, "volume": 1.0})
    symbols = to_contract(frame, "f.csv", sort=False)["symbol"]
    assert symbols.tolist()[0] == "AAA" and symbols.tolist()[3] == "7"
    assert symbols.isna().tolist() == [False, True, True, False]
    assert set(to_contract(frame, "f.csv")["symbol"].dropna()) == {"AAA", "7"}  # no 'nan', no 'None'
