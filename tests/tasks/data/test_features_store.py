"""The on-disk panel of the features stage: pass 1 and 2 fill it as the in-memory pivot does,
and its ``.npy`` files are written, continued and compared a block at a time."""

import numpy as np
import pandas as pd
import pytest

from tasks.data.bars import VALIDATED, panel, write_parquet
from tasks.data.panel_store import ColumnStore, NpyWriter, digest, same_rows, scan, symbol_rows
from tasks.errors import DataError

TS = pd.date_range("2021-01-04", periods=8, freq="D", tz="UTC")


def bars() -> pd.DataFrame:
    """A listed late (bar 2), B with a gap (bars 3-4), a NaN open and volume; C stops after bar 5."""
    rows = {"A": range(2, 8), "B": [0, 1, 2, 5, 6, 7], "C": range(0, 6)}
    frames = []
    for symbol, at in rows.items():
        at = list(at)
        close = 10.0 + np.arange(len(at)) + ord(symbol)
        frames.append(pd.DataFrame({"symbol": symbol, "ts": TS[at], "open": close - 0.5, "high": close + 1,
                                    "low": close - 1, "close": close, "volume": 100.0}))
    out = pd.concat(frames, ignore_index=True)
    out.loc[7, ["open", "volume"]] = np.nan
    return out


def test_the_symbol_columns_are_the_pivoted_panels(tmp_path):
    path = tmp_path / VALIDATED
    frame = bars()
    write_parquet(frame, path, "1d")
    scanned = scan(path)
    wide = panel(frame)
    assert scanned.symbols == ["A", "B", "C"] and scanned.ragged
    np.testing.assert_array_equal(scanned.index, wide["close"].index.as_unit("ns").asi8)
    for symbol, rows in frame.groupby("symbol"):
        placed = symbol_rows(rows.reset_index(drop=True), scanned.index)
        real = wide["real"][symbol].to_numpy()
        np.testing.assert_array_equal(placed.positions, np.flatnonzero(real))
        np.testing.assert_array_equal(placed.close, wide["close"][symbol].to_numpy())
        np.testing.assert_array_equal(placed.open, wide["open"][symbol].to_numpy())
        for field in ("open", "high", "low", "close", "volume"):
            np.testing.assert_array_equal(placed.own[field], wide[field][symbol].to_numpy()[real])


def test_a_repeated_timestamp_is_a_one_line_error(tmp_path):
    frame = bars()
    frame.loc[1, "ts"] = frame.loc[0, "ts"]
    write_parquet(frame, tmp_path / VALIDATED, "1d")
    with pytest.raises(DataError, match=r"A has a repeated or unsorted timestamp at 2021-01-06"):
        scan(tmp_path / VALIDATED)


def test_the_column_store_reads_back_row_blocks(tmp_path):
    store = ColumnStore(tmp_path / "store", ["x", "y"], 3, 5)
    for j in range(3):
        store.write({"x": np.arange(5.0) + 10 * j, "y": -np.arange(5.0)})
    store.close()
    np.testing.assert_array_equal(store.rows("x", 1, 3), [[1, 11, 21], [2, 12, 22]])
    np.testing.assert_array_equal(store.field("y")[3:5], [[-3, -3, -3], [-4, -4, -4]])


def test_an_npy_file_is_written_in_blocks_continued_and_compared(tmp_path):
    values = np.arange(24, dtype=np.float32).reshape(6, 2, 2)
    writer = NpyWriter(tmp_path / "a.npy", np.float32, (6, 2, 2))
    writer.write(values[:4])
    writer.write(values[4:])
    writer.close()
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), values)
    longer = NpyWriter(tmp_path / "b.npy", np.float32, (8, 2, 2))
    longer.copy_from(tmp_path / "a.npy", 6)
    longer.write(np.zeros((2, 2, 2), np.float32))
    longer.close()
    np.testing.assert_array_equal(np.load(tmp_path / "b.npy")[:6], values)
    assert same_rows(tmp_path / "a.npy", tmp_path / "b.npy") and not same_rows(tmp_path / "b.npy", tmp_path / "a.npy")
    np.save(tmp_path / "c.npy", np.concatenate([values[:5], values[5:] + 1]))
    assert not same_rows(tmp_path / "a.npy", tmp_path / "c.npy")
    with pytest.raises(RuntimeError, match="5 of 6 rows"):
        short = NpyWriter(tmp_path / "d.npy", np.float32, (6, 2, 2))
        short.write(values[:5])
        short.close()


def test_the_digest_of_earlier_bars_ignores_later_ones_and_sees_a_changed_close():
    frame = bars()
    rows = frame[frame["symbol"] == "A"].reset_index(drop=True)
    cut = int(TS[4].value)
    first, whole = digest(rows, [cut, int(TS[7].value)])
    assert digest(rows[rows["ts"] <= TS[4]], [cut]) == [first] and whole != first
    changed = rows.copy()
    changed.loc[0, "close"] += 0.01
    assert digest(changed, [cut])[0] != first
