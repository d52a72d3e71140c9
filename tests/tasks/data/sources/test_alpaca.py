"""The Alpaca adapter against a local stand-in of Alpaca's market-data API (offline, fast)."""

from __future__ import annotations

import base64
import logging
import socket
from collections.abc import Iterator
from datetime import date

import pandas as pd
import pytest
import requests

from tasks.config_data import AlpacaParams
from tasks.data.bars import COLUMNS
from tasks.data.sources import Request, Source, SourceError
from tasks.data.sources.alpaca import AlpacaSource, regular_hours
from tests.standins.alpaca_server import AlpacaStandin, generate_bars

KEY_ID, SECRET = "PKTESTKEYID0123456789", "s3cr3t-Test-Secret-Key-abcdefghijklmnop"
ENV = {"APCA_API_KEY_ID": KEY_ID, "APCA_API_SECRET_KEY": SECRET}

# Uneven coverage: BBB starts later, CCC stops earlier; March 2024 crosses the DST change
# (daily bars stamped 05:00Z before 10 March, 04:00Z after).
DAILY = generate_bars(
    {"AAA": (date(2024, 1, 1), date(2024, 4, 30)), "BBB": (date(2024, 2, 15), date(2024, 4, 30)),
     "CCC": (date(2024, 1, 1), date(2024, 3, 29))},
    "1Day", seed=1,
)
MINUTE = generate_bars({"AAA": (date(2024, 3, 7), date(2024, 3, 12)), "BBB": (date(2024, 3, 7), date(2024, 3, 12))},
                       "1Min", seed=2)


@pytest.fixture
def server() -> Iterator[AlpacaStandin]:
    with AlpacaStandin(DAILY, MINUTE, key_id=KEY_ID, secret_key=SECRET) as standin:
        yield standin


def source(server: AlpacaStandin, page_limit: int = 10_000, env: dict[str, str] | None = None,
           **kwargs: float) -> AlpacaSource:
    params = AlpacaParams(data_url=server.url, page_limit=page_limit)
    return AlpacaSource(params, ENV if env is None else env, retry_wait_s=0.0, **kwargs)


def daily_request(*symbols: str, start: date = date(2024, 1, 1), end: date = date(2024, 4, 30)) -> Request:
    return Request(symbols=symbols or ("AAA", "BBB", "CCC"), start=start, end=end, freq="1d")


def one_line_error(excinfo: pytest.ExceptionInfo[SourceError]) -> str:
    text = str(excinfo.value)
    assert "\n" not in text and text.startswith("alpaca: ")
    assert KEY_ID not in text and SECRET not in text
    return text


def test_is_a_source() -> None:
    src: Source = AlpacaSource(AlpacaParams())
    assert src.name == "alpaca"


def test_paging_across_symbols_returns_every_bar_exactly_once(server: AlpacaStandin) -> None:
    frame = source(server, page_limit=37).fetch(daily_request())
    expected = {(s, b["t"]) for s, bars in DAILY.items() for b in bars}
    assert len(frame) == len(expected) > 4 * 37
    assert not frame.duplicated(["symbol", "ts"]).any()
    assert frame.groupby("symbol").size().to_dict() == {s: len(b) for s, b in DAILY.items()}
    pages = server.requests
    assert len(pages) == -(-len(expected) // 37)  # ceil: every page fetched, none twice
    assert all(p["limit"] == "37" for p in pages)
    assert "page_token" not in pages[0] and all("page_token" in p for p in pages[1:])
    assert pages[0]["symbols"] == "AAA,BBB,CCC" and pages[0]["timeframe"] == "1Day"
    assert pages[0]["feed"] == "iex" and pages[0]["adjustment"] == "all"


def test_values_survive_paging_unchanged(server: AlpacaStandin) -> None:
    frame = source(server, page_limit=50).fetch(daily_request())
    last = DAILY["BBB"][-1]
    row = frame[frame.symbol == "BBB"].iloc[-1]
    assert [row.open, row.high, row.low, row.close, row.volume] == [last[k] for k in ("o", "h", "l", "c", "v")]


def test_daily_bars_are_session_dates_at_midnight_utc(server: AlpacaStandin) -> None:
    frame = source(server).fetch(daily_request("AAA", start=date(2024, 3, 4), end=date(2024, 3, 15)))
    assert list(frame.columns) == list(COLUMNS)
    assert str(frame.ts.dtype) == "datetime64[ns, UTC]"
    assert all(str(frame[c].dtype) == "float64" for c in ("open", "high", "low", "close", "volume"))
    assert (frame.ts == frame.ts.dt.floor("D")).all()
    sessions = pd.bdate_range("2024-03-04", "2024-03-15", tz="UTC")  # spans the 10 March DST change
    assert list(frame.ts) == list(sessions)


def test_date_range_is_inclusive_in_new_york_days(server: AlpacaStandin) -> None:
    frame = source(server).fetch(daily_request("AAA", "CCC", start=date(2024, 3, 28), end=date(2024, 4, 2)))
    days = {s: [str(d.date()) for d in g.ts] for s, g in frame.groupby("symbol")}
    assert days == {"AAA": ["2024-03-28", "2024-03-29", "2024-04-01", "2024-04-02"],
                    "CCC": ["2024-03-28", "2024-03-29"]}


def test_minute_bars_keep_bar_start_in_utc(server: AlpacaStandin) -> None:
    request = Request(symbols=("AAA", "BBB"), start=date(2024, 3, 8), end=date(2024, 3, 11), freq="1min")
    frame = source(server, page_limit=500).fetch(request)
    assert server.requests[0]["timeframe"] == "1Min"
    assert len(frame) == 2 * 2 * 390 and frame.groupby("symbol").size().tolist() == [780, 780]
    first_per_day = frame[frame.symbol == "AAA"].groupby(frame.ts.dt.date).ts.min().tolist()
    # 09:30 New York: 14:30Z before the DST change (8 March), 13:30Z after (11 March)
    assert first_per_day == [pd.Timestamp("2024-03-08 14:30", tz="UTC"), pd.Timestamp("2024-03-11 13:30", tz="UTC")]
    assert frame.equals(frame.sort_values(["symbol", "ts"]).reset_index(drop=True))


def test_keys_come_from_the_environment(server: AlpacaStandin, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APCA_API_KEY_ID", KEY_ID)
    monkeypatch.setenv("APCA_API_SECRET_KEY", SECRET)
    src = AlpacaSource(AlpacaParams(data_url=server.url))
    assert len(src.fetch(daily_request("AAA"))) == len(DAILY["AAA"])


@pytest.mark.parametrize(
    ("env", "named"),
    [({}, ["APCA_API_KEY_ID", "APCA_API_SECRET_KEY"]), ({"APCA_API_KEY_ID": KEY_ID}, ["APCA_API_SECRET_KEY"]),
     ({"APCA_API_KEY_ID": " ", "APCA_API_SECRET_KEY": SECRET}, ["APCA_API_KEY_ID"])],
)
def test_missing_keys_name_the_variables(server: AlpacaStandin, env: dict[str, str], named: list[str]) -> None:
    with pytest.raises(SourceError) as excinfo:
        source(server, env=env).fetch(daily_request())
    text = one_line_error(excinfo)
    assert all(var in text for var in named) and "missing API key" in text
    assert server.requests == []  # nothing was sent


def test_wrong_keys_never_leak(server: AlpacaStandin, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    src = source(server, env={"APCA_API_KEY_ID": KEY_ID, "APCA_API_SECRET_KEY": SECRET + "-wrong"})
    with pytest.raises(SourceError) as excinfo:
        src.fetch(daily_request())
    text = one_line_error(excinfo)
    assert "HTTP 403" in text and "APCA_API_KEY_ID" in text
    assert KEY_ID not in repr(src) and SECRET not in repr(src)
    assert KEY_ID not in caplog.text and SECRET not in caplog.text


@pytest.mark.parametrize(("status", "message"), [(401, "request is not authorized"), (422, "invalid start")])
def test_http_errors_are_one_line_and_not_retried(server: AlpacaStandin, status: int, message: str) -> None:
    server.fail(status, message)
    with pytest.raises(SourceError) as excinfo:
        source(server).fetch(daily_request())
    text = one_line_error(excinfo)
    assert f"HTTP {status}: {message}" in text and "AAA, BBB, CCC, 2024-01-01..2024-04-30, 1d" in text
    assert len(server.requests) == 1


def test_empty_result_is_an_error(server: AlpacaStandin) -> None:
    with pytest.raises(SourceError) as excinfo:
        source(server).fetch(daily_request(start=date(2024, 3, 9), end=date(2024, 3, 10)))  # a weekend
    assert "no bars returned" in one_line_error(excinfo)


def test_missing_symbol_is_named(server: AlpacaStandin) -> None:
    with pytest.raises(SourceError) as excinfo:
        source(server).fetch(daily_request("AAA", "NOPE", "CCC"))
    text = one_line_error(excinfo)
    assert "no bars for NOPE " in text


def test_symbol_without_bars_in_range_is_missing(server: AlpacaStandin) -> None:
    with pytest.raises(SourceError) as excinfo:  # BBB starts on 15 February
        source(server).fetch(daily_request("AAA", "BBB", end=date(2024, 2, 1)))
    assert "no bars for BBB " in one_line_error(excinfo)


@pytest.mark.parametrize("status", [500, 429, 503])
def test_transient_errors_are_retried(server: AlpacaStandin, status: int) -> None:
    server.fail(status, times=2)
    frame = source(server, page_limit=100).fetch(daily_request())
    assert len(frame) == sum(len(b) for b in DAILY.values())
    assert len(server.requests) == 2 + -(-len(frame) // 100)


def test_transient_error_mid_paging_loses_nothing(server: AlpacaStandin) -> None:
    src = source(server, page_limit=40)
    expected = src.fetch(daily_request())
    server.requests.clear()
    original = server.answer
    calls = {"n": 0}

    def fail_third(path, query, headers):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        return (500, {"message": "boom"}, 0.0) if calls["n"] == 3 else original(path, query, headers)

    server.answer = fail_third  # type: ignore[method-assign]
    assert src.fetch(daily_request()).equals(expected)


def test_persistent_5xx_gives_up(server: AlpacaStandin) -> None:
    server.fail(500, "internal error", times=10)
    with pytest.raises(SourceError) as excinfo:
        source(server, retries=2).fetch(daily_request())
    assert "HTTP 500: internal error (after 2 retries)" in one_line_error(excinfo)
    assert len(server.requests) == 3


def test_unreachable_server(server: AlpacaStandin) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    src = AlpacaSource(AlpacaParams(data_url=f"http://127.0.0.1:{port}"), ENV, retry_wait_s=0.0)
    with pytest.raises(SourceError) as excinfo:
        src.fetch(daily_request())
    assert f"cannot connect to http://127.0.0.1:{port}" in one_line_error(excinfo)


def test_stalled_server_times_out(server: AlpacaStandin) -> None:
    server.fail(200, delay_s=1.0)
    with pytest.raises(SourceError) as excinfo:
        source(server, timeout_s=0.2).fetch(daily_request())
    assert "timed out" in one_line_error(excinfo)


def test_standin_speaks_alpacas_protocol(server: AlpacaStandin) -> None:
    url = f"{server.url}/v2/stocks/bars"
    query = {"symbols": "AAA,CCC", "timeframe": "1Day", "start": "2024-03-28", "end": "2024-04-02", "limit": "3"}
    assert requests.get(url, params=query, timeout=5).status_code == 401
    headers = {"APCA-API-KEY-ID": KEY_ID, "APCA-API-SECRET-KEY": SECRET}
    first = requests.get(url, params=query, headers=headers, timeout=5).json()
    assert list(first["bars"]) == ["AAA"] and len(first["bars"]["AAA"]) == 3
    assert set(first["bars"]["AAA"][0]) == {"t", "o", "h", "l", "c", "v", "n", "vw"}
    assert base64.b64decode(first["next_page_token"]).decode().startswith("AAA|M|2024-04-01T04:00:00")
    query["page_token"] = first["next_page_token"]
    second = requests.get(url, params=query, headers=headers, timeout=5).json()
    assert {s: len(b) for s, b in second["bars"].items()} == {"AAA": 1, "CCC": 2}  # one page spans two symbols
    assert second["next_page_token"] is None
    bad = requests.get(url, params={**query, "page_token": None, "timeframe": "7Fortnight"}, headers=headers, timeout=5)
    assert bad.status_code == 400 and "invalid timeframe" in bad.json()["message"]


def test_standin_shuts_down_cleanly() -> None:
    with AlpacaStandin() as standin:
        url = standin.url
        assert requests.get(f"{url}/v2/stocks/bars", timeout=5).status_code == 401
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{url}/v2/stocks/bars", timeout=1)


def test_regular_hours_keeps_session_minutes_only() -> None:
    """09:30-15:59 New York is 13:30-19:59 UTC in July; the day after Thanksgiving closes at 13:00 (18:00 UTC)."""
    stamps = ["2024-07-08 08:00", "2024-07-08 13:29", "2024-07-08 13:30", "2024-07-08 19:59", "2024-07-08 20:00",
              "2024-07-08 23:59", "2024-11-29 14:30", "2024-11-29 17:59", "2024-11-29 18:00"]
    bars = pd.DataFrame({"symbol": "AAA", "ts": pd.to_datetime(stamps, utc=True), "open": 1.0, "high": 1.0,
                         "low": 1.0, "close": 1.0, "volume": 1.0})
    kept = regular_hours(bars)
    assert kept["ts"].dt.strftime("%m-%d %H:%M").tolist() == ["07-08 13:30", "07-08 19:59", "11-29 14:30",
                                                               "11-29 17:59"]
    assert kept.index.tolist() == [0, 1, 2, 3]
    assert regular_hours(bars.iloc[:0]).empty
