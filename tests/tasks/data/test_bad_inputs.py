"""The bad-input corpus: every malformed input ends in one line or in quarantine, never in a
traceback or a half-written output (issue 3 §6)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tasks.data.ingest import ingest
from tasks.data.synthetic_daily import nyse_sessions
from tasks.data.validate import VALIDATED, validate
from tasks.errors import PodracerError
from tests.conftest import tiny_params


def good_bars() -> pd.DataFrame:
    days = nyse_sessions(pd.Timestamp("2021-01-04").date(), pd.Timestamp("2021-03-31").date())
    rng = np.random.default_rng(0)
    frames = []
    for symbol in ("AAA", "BBB"):
        close = 50 * np.exp(np.cumsum(rng.normal(0, 0.01, len(days))))
        frames.append(pd.DataFrame({"ts": days.strftime("%Y-%m-%dT%H:%M:%SZ"), "symbol": symbol,
                                    "open": close * 0.999, "high": close * 1.01, "low": close * 0.99,
                                    "close": close, "volume": 1e5}))
    return pd.concat(frames, ignore_index=True)


def set_cell(row: int, column: str, value: object) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def mutate(frame: pd.DataFrame) -> pd.DataFrame:
        frame[column] = frame[column].astype(object) if isinstance(value, str) else frame[column]
        frame.loc[row, column] = value
        return frame
    return mutate


def huge_gap(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop(index=range(10, 30))


def weekend(frame: pd.DataFrame) -> pd.DataFrame:
    frame.loc[5, "ts"] = "2021-01-09T00:00:00Z"  # a Saturday
    return frame


def mixed(frame: pd.DataFrame) -> pd.DataFrame:
    extra = frame.iloc[[3]].assign(ts="2021-01-07T15:31:00Z")
    return pd.concat([frame, extra], ignore_index=True)


# name -> (mutation of the good frame, how the file is written, what must be said)
CSV_CASES: dict[str, tuple[Callable[[pd.DataFrame], pd.DataFrame], str]] = {
    "missing column": (lambda f: f.drop(columns="volume"), "missing column(s) volume"),
    "wrong dtype": (set_cell(3, "open", "abc"), "column open is not numeric"),
    "tz-naive timestamps": (lambda f: f.assign(ts=f["ts"].str.rstrip("Z")), "no time zone"),
    "duplicate rows": (lambda f: pd.concat([f, f.iloc[[4]]], ignore_index=True), "duplicate (symbol, ts)"),
    "zero price": (set_cell(2, "close", 0.0), "close <= 0"),
    "negative price": (set_cell(6, "low", -1.0), "low <= 0"),
    "high < low": (set_cell(8, "high", 1.0), "high < low"),
    "NaNs": (set_cell(9, "volume", np.nan), "null volume"),
    "unknown symbol": (set_cell(1, "symbol", "ZZZ"), "unknown symbol"),
    "out-of-session bar": (weekend, "not an NYSE session"),
    "huge gap": (huge_gap, "misses 20 sessions"),
    "mixed frequencies": (mixed, "intraday timestamps in daily bars"),
    "bad ticker": (set_cell(0, "symbol", "../etc"), "'../etc' is not a ticker"),
}


def run(tmp_path: Path, path: Path) -> str:
    """Ingest + validate the file; return the one-line error or the quarantine reasons."""
    params = tiny_params(tmp_path, "data.source=file", f"data.path={path}", "data.tickers=[AAA,BBB]",
                         "data.start=2021-01-01", "data.end=2021-03-31")
    try:
        ingest(params)
        validate(params)
    except PodracerError as err:
        message = str(err)
        assert "\n" not in message and len(message) < 400
        assert not (params.dirs.validated / VALIDATED).exists()  # nothing half-written downstream
        quarantined = list(params.dirs.quarantine.glob("*.parquet")) if params.dirs.quarantine.exists() else []
        reasons = [r for q in quarantined for r in pd.read_parquet(q)["reason"]]
        return message + " | " + " | ".join(reasons)
    pytest.fail("a malformed input passed validation")


@pytest.mark.parametrize("case", sorted(CSV_CASES))
def test_malformed_csv(tmp_path, case):
    mutate, expected = CSV_CASES[case]
    path = tmp_path / "bars.csv"
    mutate(good_bars()).to_csv(path, index=False)
    assert expected in run(tmp_path, path)


def test_empty_file(tmp_path):
    path = tmp_path / "bars.csv"
    path.write_text("")
    assert "empty file" in run(tmp_path, path)


def test_non_utf8_csv(tmp_path):
    path = tmp_path / "bars.csv"
    path.write_bytes(good_bars().to_csv(index=False).encode().replace(b"AAA", b"A\xe9A", 1))
    assert "not UTF-8" in run(tmp_path, path)


def test_truncated_parquet(tmp_path):
    path = tmp_path / "bars.parquet"
    pq.write_table(pa.Table.from_pandas(good_bars()), path)
    path.write_bytes(path.read_bytes()[:-100])
    assert "unreadable" in run(tmp_path, path)


def test_unsorted_raw_rows_are_quarantined(tmp_path):
    params = tiny_params(tmp_path)
    ingest(params)
    raw = params.dirs.raw / "SYN001.parquet"
    frame = pd.read_parquet(raw)
    frame.iloc[[10, 11]] = frame.iloc[[11, 10]].to_numpy()
    frame.to_parquet(raw)
    with pytest.raises(PodracerError) as err:
        validate(params)
    assert "ts not increasing" in str(err.value) and "SYN001.parquet: 1 (" in str(err.value)
