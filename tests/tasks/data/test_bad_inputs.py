"""The bad-input corpus: every malformed input ends in one line or in quarantine, never in a
traceback or a half-written output (docs/data.md)."""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from standins.tiny import tiny_params
from tasks.calendar import calendar_index, nyse_sessions
from tasks.data.ingest import ingest
from tasks.data.validate import VALIDATED, validate
from tasks.errors import PodracerError


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
    "wrong dtype": (set_cell(3, "open", "abc"), "line 5, column open: 'abc' is not a number"),
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


def run(tmp_path: Path, path: Path, *overrides: str) -> str:
    """Ingest + validate the file; return the one-line error or the quarantine reasons."""
    params = tiny_params(tmp_path, "data.source=file", f"data.path={path}", "data.tickers=[AAA,BBB]",
                         "data.start=2021-01-01", "data.end=2021-03-31", *overrides)
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


# Files as people have them (docs/data.md, ragged universes): each shape below ends in one line naming the file,
# the line and the field, or in a quarantine entry with its reason; the shapes that import are test_files_import.py's.

def imported(tmp_path: Path, path: Path, *overrides: str) -> pd.DataFrame:
    """Ingest + validate the file, which must pass; return the validated bars."""
    params = tiny_params(tmp_path, "data.source=file", f"data.path={path}", "data.tickers=[AAA,BBB]",
                         "data.start=2021-01-01", "data.end=2021-03-31", *overrides)
    ingest(params)
    validate(params)
    return pd.read_parquet(params.dirs.validated / VALIDATED)


def dates_only() -> pd.DataFrame:
    frame = good_bars()
    return frame.assign(ts=frame["ts"].str[:10])  # 2021-01-04, as Yahoo and Kaggle write daily bars


def intraday_bars(stamps: list[str]) -> pd.DataFrame:
    """AAA and BBB minute bars at ``stamps`` (text, as the file holds them)."""
    close = 50 + 0.01 * np.arange(len(stamps))
    return pd.concat([pd.DataFrame({"ts": stamps, "symbol": s, "open": close, "high": close + 0.02,
                                    "low": close - 0.02, "close": close, "volume": 100.0}) for s in ("AAA", "BBB")],
                     ignore_index=True)


NY_MORNING = [f"2021-03-04 09:{m}:00" for m in range(30, 60)]
"""Zone-less New York wall-clock minutes; 09:30 EST is 14:30 UTC."""
MINUTES = ("data.freq=1min", "data.start=2021-03-01", "data.end=2021-03-31")


def absurd_close(frame: pd.DataFrame) -> pd.DataFrame:
    frame.loc[10, ["high", "close"]] = 1e12  # OHLC-consistent, a x10^10 jump
    return frame


def with_nulls(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.astype({"open": object})
    frame.loc[7, "open"] = "null"  # how Yahoo's CSV export writes a missing value
    return frame


FILE_CASES: dict[str, tuple[Callable[[Path], None], tuple[str, ...], str]] = {
    # name -> (write the file, extra overrides, what must be said)
    "header and no rows": (lambda p: p.write_text("ts,symbol,open,high,low,close,volume\n"), (), "no rows"),
    "zip with two CSVs": (lambda p: write_two(p), (),
                          "a zip must hold exactly one CSV, this one holds 2 CSV files (AAA.csv, BBB.csv)"),
    "close of 1e12": (lambda p: absurd_close(dates_only()).to_csv(p, index=False), (),
                      "AAA.parquet: 1 (log return beyond validation.max_abs_log_return)"),
    "Yahoo null": (lambda p: with_nulls(dates_only()).to_csv(p, index=False), (), "null open"),
    "Excel slash dates": (lambda p: dates_only().assign(ts="1/4/2021").to_csv(p, index=False), (),
                          "line 2, column ts: '1/4/2021': a slash date is ambiguous"),
    "Excel serial days": (lambda p: dates_only().assign(ts=44200).to_csv(p, index=False), (),
                          "column ts holds numbers (line 2: '44200')"),
    "one ticker, no symbol column": (
        lambda p: dates_only().drop(columns="symbol").to_csv(p, index=False), (),
        "missing column(s) symbol (the file has ts, open, high, low, close, volume; map them with data.columns)"),
    "a zone on some rows only": (
        lambda p: good_bars().assign(ts=lambda f: f["ts"].where(f.index != 3, "2021-01-07")).to_csv(p, index=False),
        (), "column ts mixes values with a zone (line 2: '2021-01-04T00:00:00Z') and without (line 5: '2021-01-07')"),
    "a ragged line": (lambda p: p.write_text(ragged(good_bars().to_csv(index=False))), (),
                      "not a table (Error tokenizing data. C error: Expected 7 fields in line 6, saw 8)"),
    "a spreadsheet": (lambda p: p.write_bytes(b"PK\x03\x04"), (), "unsupported file type (use .csv, .csv.gz"),
}


def session(*days: str) -> list[str]:
    """Every minute of these NYSE sessions, as UTC text (2021-03-04 and -05: 14:30Z to 20:59Z)."""
    minutes = [calendar_index("1min", pd.Timestamp(d, tz="UTC"), pd.Timestamp(d, tz="UTC")) for d in days]
    return [t.strftime("%Y-%m-%dT%H:%M:%SZ") for m in minutes for t in m]


TWO_SESSIONS = session("2021-03-04", "2021-03-05")


def afternoon_missing(frame: pd.DataFrame) -> pd.DataFrame:
    """AAA loses the second half of 2021-03-04: its 195 minutes from 17:45Z to the close."""
    return frame.drop(index=range(195, 390))


# Minute bars, as a file import brings them: name -> (the file's frame, what must be said)
MINUTE_CASES: dict[str, tuple[Callable[[], pd.DataFrame], str]] = {
    "a bar at 16:30 New York": (lambda: intraday_bars([*TWO_SESSIONS, "2021-03-05T21:30:00Z"]),
                                "AAA.parquet: 1 (outside NYSE session)"),
    "a bar on a Saturday": (lambda: intraday_bars([*TWO_SESSIONS, "2021-03-06T15:00:00Z"]),
                            "AAA.parquet: 1 (outside NYSE session)"),
    "a duplicate minute": (lambda: pd.concat([intraday_bars(TWO_SESSIONS)] * 2).iloc[:len(TWO_SESSIONS) * 2 + 1],
                           "AAA.parquet: 2 (duplicate (symbol, ts), ts not increasing)"),
    "half a day missing": (lambda: afternoon_missing(intraday_bars(TWO_SESSIONS)),
                           "AAA.parquet: AAA misses 195 minutes between 2021-03-04 17:44:00+00:00 and "
                           "2021-03-05 14:30:00+00:00 (validation.max_gap_bars = 5)"),
    "zone-less minutes without data.timezone": (lambda: intraday_bars(NY_MORNING),
                                                "no time zone (line 2: 2021-03-04 09:30:00); set data.timezone "
                                                "(e.g. America/New_York)"),
}


@pytest.mark.parametrize("case", sorted(MINUTE_CASES))
def test_bad_minute_bars_end_in_one_line_or_quarantine(tmp_path, case):
    make, expected = MINUTE_CASES[case]
    path = tmp_path / "bars.csv"
    make().to_csv(path, index=False)
    assert expected in run(tmp_path, path, *MINUTES)


def test_the_same_minutes_without_the_fault_pass(tmp_path):
    """The minute cases above fail for their fault alone: the two clean sessions validate whole."""
    path = tmp_path / "bars.csv"
    intraday_bars(TWO_SESSIONS).to_csv(path, index=False)
    bars = imported(tmp_path, path, *MINUTES)
    assert len(bars) == 2 * 780 and bars["ts"].iloc[0] == pd.Timestamp("2021-03-04 14:30", tz="UTC")


def write_two(path: Path) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        for symbol, group in dates_only().groupby("symbol"):
            archive.writestr(f"{symbol}.csv", group.to_csv(index=False))


def ragged(text: str) -> str:
    lines = text.splitlines()
    lines[5] += ",9"  # line 6 of the file has a field too many
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("case", sorted(FILE_CASES))
def test_file_shapes_end_in_one_line_or_quarantine(tmp_path, case):
    write, overrides, expected = FILE_CASES[case]
    suffix = {"zip with two CSVs": ".zip", "a spreadsheet": ".xlsx"}.get(case, ".csv")
    path = tmp_path / f"bars{suffix}"
    write(path)
    assert expected in run(tmp_path, path, *overrides)


def test_an_absurd_close_is_quarantined_by_the_hard_limit_naming_symbol_ts_and_value(tmp_path):
    frame = absurd_close(dates_only())
    path = tmp_path / "bars.csv"
    frame.to_csv(path, index=False)
    beyond = r"1 of 122 rows bad in .*AAA.parquet: 1 \(log return beyond validation.max_abs_log_return\)"
    with pytest.raises(PodracerError, match=beyond):
        imported(tmp_path, path)
    quarantined = pd.read_parquet(tmp_path / "data" / "quarantine" / "AAA.parquet")
    move = np.log(1e12) - np.log(frame.loc[9, "close"])  # against the last kept close; row 11 is judged by it too
    assert len(quarantined) == 1 and quarantined.loc[0, "ts"] == pd.Timestamp("2021-01-19", tz="UTC")
    assert quarantined.loc[0, "reason"] == ("log return beyond validation.max_abs_log_return: AAA 2021-01-19 "
                                            f"00:00:00+00:00 log return +{move:.2f} beyond ±3")
    report = (tmp_path / "data" / "quarantine" / "report.md").read_text()
    assert "| log return beyond validation.max_abs_log_return | 1 |" in report
    assert f"- {quarantined.loc[0, 'reason']}\n" in report  # listed in full under the hard limit


def ragged_universe() -> pd.DataFrame:
    """A year of bars: BBB lists in July, CCC stops after September, DDD has one row in June and
    EEE halts for 3 sessions in August (docs/data.md, ragged universes)."""
    days = nyse_sessions(pd.Timestamp("2021-01-04").date(), pd.Timestamp("2021-12-31").date())
    keep = {"AAA": days == days, "BBB": days >= "2021-07-01", "CCC": days <= "2021-09-30",
            "DDD": days == "2021-06-15", "EEE": ~((days >= "2021-08-10") & (days <= "2021-08-12"))}
    rng = np.random.default_rng(1)
    frames = []
    for symbol, mask in keep.items():
        close = 50 * np.exp(np.cumsum(rng.normal(0, 0.01, len(days))))[mask]
        frames.append(pd.DataFrame({"ts": days[mask].strftime("%Y-%m-%d"), "symbol": symbol, "open": close,
                                    "high": close * 1.01, "low": close * 0.99, "close": close, "volume": 1e5}))
    return pd.concat(frames, ignore_index=True)


def test_a_ragged_universe_keeps_every_bar_and_masks_what_cannot_trade(tmp_path):
    from tasks.data import feature_set, features

    path = tmp_path / "ragged.csv"
    ragged_universe().to_csv(path, index=False)
    params = tiny_params(tmp_path, "data.source=file", f"data.path={path}", "data.tickers=[AAA,BBB,CCC,DDD,EEE]",
                         "data.start=2021-01-01", "data.end=2021-12-31", "features.indicators=[ret_5, rsi_30]",
                         "features.warmup=10", "features.min_history=20", "features.train_end=2021-08-31",
                         "features.val_end=2021-10-31")
    ingest(params)
    validate(params)
    features.features(params)
    fs = feature_set.load(params.dirs.features)
    sessions = len(nyse_sessions(pd.Timestamp("2021-01-04").date(), pd.Timestamp("2021-12-31").date()))
    assert len(fs.timestamps) == sessions - 10  # not cut to BBB's listing in July
    assert fs.symbols == ["AAA", "BBB", "CCC", "EEE"]  # DDD, one row, never trades
    day = pd.DatetimeIndex(fs.timestamps)
    tradable = pd.DataFrame(np.asarray(fs.tradable), index=day, columns=fs.symbols)
    assert tradable["BBB"].sum() == (day >= "2021-07-01").sum() - 19  # its own 20-bar warm-up
    assert not tradable.loc["2021-10-01":, "CCC"].any() and tradable.loc[:"2021-09-30", "CCC"].sum() == \
        (day <= "2021-09-30").sum() - 9  # 20 real bars: the 10-bar panel warm-up, then 9 more
    assert not tradable.loc["2021-08-10":"2021-08-12", "EEE"].any() and tradable.loc["2021-08-13", "EEE"]
    cover = {c.symbol: c for c in fs.coverage}
    assert cover["DDD"].real_bars == 1 and cover["EEE"].gaps == 3
    assert cover["CCC"].after_end == (day > "2021-09-30").sum()
