"""The Yahoo adapter against recorded yfinance 1.7 frames (offline, no sleeping).

The frames under ``data/`` come from the real ``yfinance.download`` with its network layer
replaced by recorded history (see ``data/make_yahoo_fixtures.py``): ``(Price, Ticker)``
columns for daily and 1-minute downloads of AAPL, MSFT and the unknown ZZZZ (NaN-padded),
the ``(Ticker, Price)`` and flat layouts, and the empty frame yfinance returns offline.
"""

from __future__ import annotations

import threading
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tasks.config_data import YahooParams
from tasks.data.bars import COLUMNS
from tasks.data.sources import Request, SourceError
from tasks.data.sources.yahoo import MINUTE_WINDOW_DAYS, YahooSource, minute_windows, normalise

DATA = Path(__file__).parent / "data"
TZ = "America/New_York"
TODAY = date(2024, 3, 18)  # the injected clock: the minute fixture (Mar 8 and 11) is recent


def recorded(name: str) -> pd.DataFrame:
    return pd.read_parquet(DATA / f"{name}.parquet")


class FakeDownload:
    """Stands in for ``yfinance.download``: records each call and serves a recorded frame.

    With ``clip`` it keeps only the requested tickers and the rows in [start, end), as
    Yahoo would; ``script`` lists what successive calls do first (an exception to raise,
    or a frame to return) before falling back to the recorded answer.
    """

    def __init__(self, clip: bool = True, script: list[Any] | None = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self.clip, self.script = clip, list(script or [])

    def __call__(self, tickers: list[str], **kwargs: Any) -> pd.DataFrame:
        self.calls.append({"tickers": tickers, **kwargs})
        if self.script:
            step = self.script.pop(0)
            if isinstance(step, BaseException):
                raise step
            return step
        frame = recorded("yahoo_1d_column" if kwargs["interval"] == "1d" else "yahoo_1min_column")
        if not self.clip:
            return frame
        stamps = frame.index if frame.index.tz is None else frame.index.tz_convert(TZ).tz_localize(None)
        days = stamps.normalize()
        rows = (days >= pd.Timestamp(kwargs["start"])) & (days < pd.Timestamp(kwargs["end"]))
        wanted = [t.upper() for t in tickers]  # yfinance upper-cases tickers
        return frame.loc[rows, frame.columns.get_level_values("Ticker").isin(wanted)]


def source(fake: FakeDownload, sleeps: list[float] | None = None, **params: Any) -> YahooSource:
    settings = {"retries": 3, "backoff_seconds": 0.5, "timeout_seconds": 5.0, **params}
    record = sleeps.append if sleeps is not None else (lambda _: None)
    return YahooSource(YahooParams(**settings), download=fake, sleep=record, today=lambda: TODAY)


def daily(*symbols: str) -> Request:
    return Request(symbols or ("AAPL", "MSFT"), date(2024, 1, 2), date(2024, 1, 9), "1d")


def assert_contract(bars: pd.DataFrame) -> None:
    assert tuple(bars.columns) == COLUMNS
    assert str(bars["ts"].dtype) == "datetime64[ns, UTC]"
    assert all(bars[c].dtype == "float64" for c in ("open", "high", "low", "close", "volume"))
    assert not bars[["open", "high", "low", "close", "volume"]].isna().any().any()
    assert bars.equals(bars.sort_values(["symbol", "ts"]).reset_index(drop=True))
    assert not bars.duplicated(["symbol", "ts"]).any()


# --- normalisation --------------------------------------------------------------------

def test_daily_bars_follow_the_contract_with_ts_at_midnight_utc():
    bars = source(FakeDownload()).fetch(daily("MSFT", "aapl"))
    assert_contract(bars)
    assert list(bars["symbol"].unique()) == ["MSFT", "aapl"]  # requested spelling, sorted
    assert len(bars) == 12
    assert (bars["ts"] == bars["ts"].dt.normalize()).all()
    assert bars["ts"].iloc[0] == pd.Timestamp("2024-01-02", tz="UTC")
    raw = recorded("yahoo_1d_column")
    first = bars[(bars["symbol"] == "MSFT")].iloc[0]
    assert first["close"] == raw[("Close", "MSFT")].iloc[0]
    assert first["volume"] == float(raw[("Volume", "MSFT")].iloc[0])


def test_minute_bars_are_converted_to_utc_across_the_dst_switch_and_padding_is_dropped():
    request = Request(("AAPL", "MSFT"), date(2024, 3, 8), date(2024, 3, 11), "1min")
    bars = source(FakeDownload()).fetch(request)
    assert_contract(bars)
    aapl = bars[bars["symbol"] == "AAPL"]["ts"]
    assert aapl.iloc[0] == pd.Timestamp("2024-03-08 14:30", tz="UTC")  # 09:30 EST
    assert aapl.iloc[5] == pd.Timestamp("2024-03-11 13:30", tz="UTC")  # 09:30 EDT
    msft = bars[bars["symbol"] == "MSFT"]["ts"]
    assert len(msft) == 9 and pd.Timestamp("2024-03-08 14:32", tz="UTC") not in set(msft)  # NaN-padded minute


def test_nan_padded_unknown_ticker_rows_are_dropped():
    raw = recorded("yahoo_1d_column")
    assert raw.xs("ZZZZ", axis=1, level="Ticker").isna().all().all()  # how yfinance pads it
    bars = normalise(raw, daily("AAPL", "MSFT", "ZZZZ"))
    assert_contract(bars)
    assert set(bars["symbol"]) == {"AAPL", "MSFT"} and len(bars) == 12


@pytest.mark.parametrize("layout", ["yahoo_1d_ticker", "yahoo_1d_single_flat"])
def test_every_yfinance_column_layout_gives_the_same_bars(layout):
    expected = normalise(recorded("yahoo_1d_column"), daily("AAPL"))
    pd.testing.assert_frame_equal(normalise(recorded(layout), daily("AAPL")), expected)


# --- batching and chunking ------------------------------------------------------------

def test_daily_request_is_one_batched_download_with_explicit_settings():
    fake = FakeDownload()
    source(fake).fetch(daily("AAPL", "MSFT"))
    assert len(fake.calls) == 1
    call = fake.calls[0]
    assert call["tickers"] == ["AAPL", "MSFT"]
    assert (call["start"], call["end"], call["interval"]) == ("2024-01-02", "2024-01-10", "1d")  # end exclusive
    assert call["auto_adjust"] is True and call["progress"] is False and call["timeout"] == 5.0


def test_minute_range_is_chunked_into_windows_of_at_most_seven_days_covering_it_exactly():
    fake = FakeDownload(clip=False)
    request = Request(("AAPL", "MSFT"), TODAY - timedelta(days=30), date(2024, 3, 15), "1min")
    source(fake).fetch(request)
    spans = [(date.fromisoformat(c["start"]), date.fromisoformat(c["end"])) for c in fake.calls]
    assert all(c["tickers"] == ["AAPL", "MSFT"] and c["interval"] == "1m" for c in fake.calls)
    assert spans[0][0] == request.start and spans[-1][1] == request.end + timedelta(days=1)
    assert all(nxt[0] == cur[1] for cur, nxt in zip(spans, spans[1:]))  # contiguous, no overlap
    assert all(timedelta(days=1) <= end - start <= timedelta(days=7) for start, end in spans)
    assert len(spans) == 4  # 28 days: Feb 17..23, Feb 24..Mar 1, Mar 2..8, Mar 9..15


@given(st.dates(date(2020, 1, 1), date(2030, 1, 1)), st.integers(0, 60))
def test_minute_windows_partition_any_range(start, length):
    end = start + timedelta(days=length)
    spans = minute_windows(start, end)
    assert spans[0][0] == start and spans[-1][1] == end
    assert all(0 <= (last - first).days < MINUTE_WINDOW_DAYS for first, last in spans)
    assert all(nxt[0] == cur[1] + timedelta(days=1) for cur, nxt in zip(spans, spans[1:]))


def test_minute_request_older_than_30_days_is_refused_before_any_download():
    fake = FakeDownload()
    request = Request(("AAPL",), TODAY - timedelta(days=31), TODAY, "1min")
    with pytest.raises(SourceError) as err:
        source(fake).fetch(request)
    message = str(err.value)
    assert "30 days" in message and "WRDS" in message and "Alpaca" in message and "AAPL" in message
    assert fake.calls == []


# --- failures -------------------------------------------------------------------------

def test_failures_are_retried_with_exponential_backoff_then_succeed():
    sleeps: list[float] = []
    fake = FakeDownload(script=[ConnectionError("reset"), recorded("yahoo_empty")])
    bars = source(fake, sleeps).fetch(daily())
    assert len(fake.calls) == 3 and sleeps == [0.5, 1.0]
    assert len(bars) == 12


def test_retry_exhaustion_raises_one_line_source_error():
    sleeps: list[float] = []
    fake = FakeDownload(script=[ConnectionError("curl: (6) Could not resolve host\ndetails")] * 3)
    with pytest.raises(SourceError) as err:
        source(fake, sleeps).fetch(daily())
    message = str(err.value)
    assert "\n" not in message and message.startswith("yahoo: download failed (ConnectionError")
    assert "after 3 attempt(s)" in message and "AAPL, MSFT" in message and "2024-01-02..2024-01-09" in message
    assert len(fake.calls) == 3 and sleeps == [0.5, 1.0]


def test_empty_frame_as_returned_offline_raises_after_retries():
    fake = FakeDownload(script=[recorded("yahoo_empty")] * 3)
    with pytest.raises(SourceError, match=r"^yahoo: no data returned \(offline or unknown tickers\?\)"):
        source(fake).fetch(daily())
    assert len(fake.calls) == 3


def test_a_window_without_sessions_may_be_empty_without_retrying():
    sleeps: list[float] = []
    fake = FakeDownload()
    request = Request(("AAPL",), date(2024, 3, 2), date(2024, 3, 10), "1min")  # second window: a weekend
    bars = source(fake, sleeps).fetch(request)
    assert len(fake.calls) == 2 and sleeps == [] and len(bars) == 5


def test_ticker_missing_from_a_non_empty_answer_is_named():
    with pytest.raises(SourceError) as err:
        source(FakeDownload()).fetch(daily("AAPL", "MSFT", "ZZZZ"))
    assert err.value.reason == "no bars for ZZZZ (unknown or delisted tickers?)"


def test_a_hanging_download_is_cut_off_by_the_deadline():
    release = threading.Event()

    def hang(tickers: list[str], **kwargs: Any) -> pd.DataFrame:
        release.wait(10)
        return recorded("yahoo_1d_column")

    yahoo = YahooSource(YahooParams(retries=1, timeout_seconds=0.05), download=hang, today=lambda: TODAY)
    try:
        with pytest.raises(SourceError, match="TimeoutError: no answer within"):
            yahoo.fetch(daily())
    finally:
        release.set()


def test_start_after_end_is_refused():
    with pytest.raises(SourceError, match="start is after end"):
        source(FakeDownload()).fetch(Request(("AAPL",), date(2024, 1, 9), date(2024, 1, 2), "1d"))


def test_real_yfinance_offline_raises_source_error(monkeypatch):
    """The real yfinance, no injection: it cannot connect, returns an empty frame, we raise.

    The proxy points at a closed local port so the call fails the same way on a machine
    that has internet; retries=1 and a 2 s timeout keep it short.
    """
    for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    for var in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
    yahoo = YahooSource(YahooParams(retries=1, backoff_seconds=0.0, timeout_seconds=2.0))
    today = date.today()
    with pytest.raises(SourceError) as err:
        yahoo.fetch(Request(("AAPL",), today - timedelta(days=14), today - timedelta(days=1), "1d"))
    assert "\n" not in str(err.value) and str(err.value).startswith("yahoo: ")
