"""Files as people have them (docs/data.md, ragged universes): each shape imports to the same
validated bars as a plain CSV with UTC timestamps, or is read in the zone or at the offsets it
gives (the malformed files are ``test_bad_inputs.py``'s)."""

from __future__ import annotations

import gzip
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.tasks.data.test_bad_inputs import MINUTES, NY_MORNING, dates_only, good_bars, imported, intraday_bars


def reference(tmp_path: Path) -> pd.DataFrame:
    """The good bars imported from a plain CSV with UTC timestamps: what every shape must equal."""
    path = tmp_path / "reference" / "bars.csv"
    path.parent.mkdir()
    good_bars().to_csv(path, index=False)
    return imported(tmp_path / "reference", path)


def test_date_only_daily_csv_is_sessions_at_midnight_utc(tmp_path):
    path = tmp_path / "bars.csv"
    dates_only().to_csv(path, index=False)
    bars = imported(tmp_path, path)
    assert bars["ts"].iloc[0] == pd.Timestamp("2021-01-04 00:00", tz="UTC")
    pd.testing.assert_frame_equal(bars, reference(tmp_path))


def test_zone_less_midnights_are_dates_too(tmp_path):
    path = tmp_path / "bars.csv"
    good_bars().assign(ts=lambda f: f["ts"].str.rstrip("Z")).to_csv(path, index=False)
    pd.testing.assert_frame_equal(imported(tmp_path, path), reference(tmp_path))


def write_gz(frame: pd.DataFrame, path: Path) -> None:
    path.write_bytes(gzip.compress(frame.to_csv(index=False).encode()))


def write_zst(frame: pd.DataFrame, path: Path) -> None:
    with pa.output_stream(str(path), compression="zstd") as stream:
        stream.write(frame.to_csv(index=False).encode())


def write_zip(frame: pd.DataFrame, path: Path) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("__MACOSX/._bars.csv", b"resource fork")  # what macOS adds; not a second CSV
        archive.writestr("export/bars.csv", frame.to_csv(index=False))


def write_partitioned(frame: pd.DataFrame, path: Path) -> None:
    pq.write_to_dataset(pa.Table.from_pandas(frame, preserve_index=False), path, partition_cols=["symbol"])


@pytest.mark.parametrize(("name", "write"), [("bars.csv.gz", write_gz), ("bars.csv.zst", write_zst),
                                             ("bars.zip", write_zip), ("bars_parquet", write_partitioned)])
def test_compressed_zipped_and_partitioned_files_import_like_the_plain_csv(tmp_path, name, write):
    path = tmp_path / name
    write(dates_only(), path)
    pd.testing.assert_frame_equal(imported(tmp_path, path), reference(tmp_path))


def test_zone_less_minutes_are_read_in_data_timezone(tmp_path):
    path = tmp_path / "bars.csv"
    intraday_bars(NY_MORNING).to_csv(path, index=False)
    bars = imported(tmp_path, path, *MINUTES, "data.timezone=America/New_York")
    assert bars["ts"].iloc[0] == pd.Timestamp("2021-03-04 14:30", tz="UTC")  # 09:30 EST = UTC-5
    assert bars["ts"].iloc[29] == pd.Timestamp("2021-03-04 14:59", tz="UTC")


def test_offsets_that_change_across_dst_are_converted_to_utc(tmp_path):
    path = tmp_path / "bars.csv"
    stamps = [f"2021-03-12T09:3{m}:00-05:00" for m in range(5)] + [f"2021-03-15T09:3{m}:00-04:00" for m in range(5)]
    intraday_bars(stamps).to_csv(path, index=False)
    bars = imported(tmp_path, path, *MINUTES, "validation.max_gap_bars=100000")
    assert bars["ts"].iloc[0] == pd.Timestamp("2021-03-12 14:30", tz="UTC")  # EST
    assert bars["ts"].iloc[5] == pd.Timestamp("2021-03-15 13:30", tz="UTC")  # EDT, after the change


def test_yfinance_stacked_download_with_adj_close(tmp_path):
    frame = dates_only().rename(columns={"ts": "Date", "symbol": "Ticker", "open": "Open", "high": "High",
                                         "low": "Low", "close": "Close", "volume": "Volume"})
    frame.insert(2, "Adj Close", frame["Close"] * 0.98)  # ignored: the contract's close is what traded
    path = tmp_path / "bars.csv"
    frame.to_csv(path, index=False)
    mapping = "data.columns={Date: ts, Ticker: symbol, Open: open, High: high, Low: low, Close: close, Volume: volume}"
    pd.testing.assert_frame_equal(imported(tmp_path, path, mapping), reference(tmp_path))


def test_kaggle_shape_lowercase_with_name_column(tmp_path):
    frame = dates_only().rename(columns={"ts": "date", "symbol": "Name"})
    path = tmp_path / "all_stocks_5yr.csv"
    frame[["date", "open", "high", "low", "close", "volume", "Name"]].to_csv(path, index=False)
    pd.testing.assert_frame_equal(imported(tmp_path, path, "data.columns={date: ts, Name: symbol}"),
                                  reference(tmp_path))


def test_thousands_separators_and_a_bom(tmp_path):
    frame = dates_only().assign(volume="1,234,567")
    path = tmp_path / "bars.csv"
    path.write_bytes(b"\xef\xbb\xbf" + frame.to_csv(index=False).encode())  # Excel's UTF-8 BOM
    bars = imported(tmp_path, path)
    assert (bars["volume"] == 1_234_567.0).all()
    pd.testing.assert_frame_equal(bars.drop(columns="volume"), reference(tmp_path).drop(columns="volume"))


def test_semicolons_and_decimal_commas(tmp_path):
    frame = dates_only()
    frame.loc[0, ["open", "high", "low", "close", "volume"]] = [51.25, 52.0, 50.5, 51.25, 1234567.5]
    path = tmp_path / "bars.csv"
    text = frame.to_csv(index=False, sep=";", decimal=",", float_format="%.6f")
    path.write_text(text.replace("1234567,500000", "1.234.567,500000"))  # a European thousands dot too
    bars = imported(tmp_path, path)
    assert tuple(bars.loc[0, ["open", "high", "low", "close", "volume"]]) == (51.25, 52.0, 50.5, 51.25, 1234567.5)
    assert np.allclose(bars["close"].iloc[1:], reference(tmp_path)["close"].iloc[1:], rtol=1e-6)


def test_header_lines_repeated_mid_file_are_dropped(tmp_path):
    frame = dates_only()
    text = frame.iloc[:60].to_csv(index=False) + frame.iloc[60:].to_csv(index=False)  # two exports pasted
    path = tmp_path / "bars.csv"
    path.write_text(text)
    pd.testing.assert_frame_equal(imported(tmp_path, path), reference(tmp_path))


def test_a_suspected_split_is_reported_with_advice_and_kept(tmp_path):
    frame = dates_only()
    later = (frame["symbol"] == "AAA") & (frame.index >= 30)
    frame.loc[later, ["open", "high", "low", "close"]] *= 0.5  # a 2-for-1 split in unadjusted prices
    path = tmp_path / "bars.csv"
    frame.to_csv(path, index=False)
    bars = imported(tmp_path, path)
    assert len(bars) == len(frame)
    report = (tmp_path / "data" / "quarantine" / "report.md").read_text()
    assert "- suspected splits (kept): 1" in report
    assert f"| AAA | {pd.Timestamp(frame.loc[30, 'ts'], tz='UTC')} |" in report and "2-for-1 split" in report
    assert "Use split-adjusted data" in report
