"""TAQ → minute bars at volume: streamed per (symbol group, day chunk), aggregated in SQL.

A throwaway PostgreSQL (standins/postgres.py) holds 1 M generated trades (10 symbols ×
5 days × 20,000 trades per symbol-day, ~9% corrections, some outside 09:30-16:00, pairs of
trades at one instant that only tr_seqnum orders); the slow test adds 15 more days (4 M).
Expected bars are computed in pandas from trades read back for just the checked minutes.
"""

from __future__ import annotations

import contextlib
import tracemalloc
from collections.abc import Iterator
from datetime import date, time

import pandas as pd
import pytest

from standins.postgres import PostgresServer, PostgresUnavailable, seed_taq_bulk, throwaway_postgres
from tasks.config_data import WrdsParams
from tasks.data.sources import Request
from tasks.data.sources.wrds import WrdsSource

SYMBOLS = tuple(f"S{i}" for i in range(9)) + ("BRK.B",)
DAYS = list(pd.bdate_range("2019-01-02", periods=20).date)
PER_DAY = 200_000  # trades per day table, all symbols: 5 days = 1 M, 20 days = 4 M


@pytest.fixture(scope="module")
def pg() -> Iterator[PostgresServer]:
    """A cluster with the first 5 days (1 M trades); missing binaries fail, never skip."""
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(throwaway_postgres())
        except PostgresUnavailable as exc:
            pytest.fail(f"throwaway PostgreSQL unavailable: {exc}", pytrace=False)
        seed_taq_bulk(server, SYMBOLS, DAYS[:5], PER_DAY)
        yield server


@pytest.fixture(scope="module")
def pg_4m(pg: PostgresServer) -> PostgresServer:
    """The same cluster with all 20 days (4 M trades)."""
    seed_taq_bulk(pg, SYMBOLS, DAYS[5:], PER_DAY, first_index=5)
    return pg


def source(server: PostgresServer, **chunking: int) -> WrdsSource:
    params = WrdsParams(dataset="taq", host=server.host, port=server.port, dbname=server.dbname)
    return WrdsSource(params, server.env(), **chunking)


def test_chunks_are_bounded_and_join_to_the_whole(pg: PostgresServer) -> None:
    request = Request(SYMBOLS, DAYS[0], DAYS[4], "1min")
    chunks = list(source(pg, symbols_per_query=4, days_per_query=2).stream(request))
    groups = [sorted(SYMBOLS)[i : i + 4] for i in (0, 4, 8)]
    day_chunks = [DAYS[0:2], DAYS[2:4], DAYS[4:5]]
    assert len(chunks) == len(groups) * len(day_chunks)
    for k, chunk in enumerate(chunks):  # symbol group major, days minor; each chunk sorted
        group, days = groups[k // 3], day_chunks[k % 3]
        assert set(chunk.symbol) == set(group) and set(chunk.ts.dt.date) == set(days)
        assert len(chunk) == len(group) * len(days) * 390  # every minute traded; never more
        assert chunk[["symbol", "ts"]].equals(chunk.sort_values(["symbol", "ts"])[["symbol", "ts"]])
    whole = source(pg).fetch(request)
    joined = pd.concat(chunks).sort_values(["symbol", "ts"], ignore_index=True)
    pd.testing.assert_frame_equal(whole, joined)
    assert len(whole) == 10 * 5 * 390 and not whole.duplicated(["symbol", "ts"]).any()
    first_last = whole.groupby(whole.ts.dt.date).ts.agg(["min", "max"])  # January: New York = UTC-5
    assert (first_last["min"].dt.time == time(14, 30)).all() and (first_last["max"].dt.time == time(20, 59)).all()


def trades_in_minute(server: PostgresServer, symbol: str, day: date, minute: time) -> pd.DataFrame:
    """Every trade of ``symbol`` in that New York minute, corrections included, as stored."""
    root, _, suffix = symbol.partition(".")
    start = pd.Timestamp.combine(day, minute)
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT time_m, tr_seqnum, price, size, tr_corr FROM taqm_{day:%Y}.ctm_{day:%Y%m%d}"
                        " WHERE sym_root = %s AND coalesce(sym_suffix, '') = %s AND time_m >= %s AND time_m < %s",
                        (root, suffix, start.time(), (start + pd.Timedelta(minutes=1)).time()))
            rows = cur.fetchall()
    finally:
        conn.close()
    return pd.DataFrame(rows, columns=["time_m", "tr_seqnum", "price", "size", "tr_corr"])


def ohlcv(trades: pd.DataFrame) -> tuple[float, ...]:
    t = trades.sort_values(["time_m", "tr_seqnum"])
    return (t.price.iat[0], t.price.max(), t.price.min(), t.price.iat[-1], float(t["size"].sum()))


PICKS = [("S0", DAYS[0], time(9, 30)), ("BRK.B", DAYS[2], time(15, 59)), ("S5", DAYS[4], time(12, 17)),
         ("S8", DAYS[1], time(10, 3)), ("S3", DAYS[3], time(13, 58)), ("BRK.B", DAYS[0], time(9, 31))]


def test_minutes_match_trades_read_back(pg: PostgresServer) -> None:
    bars = source(pg, days_per_query=2).fetch(Request(SYMBOLS, DAYS[0], DAYS[4], "1min"))
    bars = bars.set_index(["symbol", "ts"])
    differs = ties = 0
    for symbol, day, minute in PICKS:
        trades = trades_in_minute(pg, symbol, day, minute)
        regular = trades[trades.tr_corr == "00"]
        ts = pd.Timestamp.combine(day, minute).tz_localize("America/New_York").tz_convert("UTC")
        got = tuple(bars.loc[(symbol, ts), ["open", "high", "low", "close", "volume"]])
        assert got == ohlcv(regular), (symbol, day, minute)
        differs += ohlcv(trades) != ohlcv(regular)
        ties += int(regular.time_m.duplicated().sum())
    assert differs >= 3 and ties >= 10  # the correction filter and the tr_seqnum order both decided values
    for outside in (time(9, 29), time(16, 0)):  # trades exist there, bars do not
        assert len(trades_in_minute(pg, "S0", DAYS[0], outside)) > 10


def test_table_without_seqnum_and_session_edges(pg: PostgresServer) -> None:
    """A day table without tr_seqnum (ties would be unordered; here times are distinct),
    with trades on both sides of 09:30 and 16:00 and a correction: bars by hand."""
    trades = [("09:29:59.999", 1.0, 1, "00"), ("09:30:00", 10.0, 100, "00"), ("09:30:30", 12.0, 50, "01"),
              ("09:30:45", 9.0, 10, "00"), ("09:30:59.999", 11.0, 5, "00"), ("15:59:59", 20.0, 7, "00"),
              ("16:00:00", 99.0, 1, "00")]
    conn = pg.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE SCHEMA taqm_2018; CREATE TABLE taqm_2018.ctm_20180601 (date date, time_m time,"
                        " sym_root varchar(6), sym_suffix varchar(10), size integer, price double precision,"
                        " tr_corr varchar(2))")
            for clock, price, size, corr in trades:
                cur.execute("INSERT INTO taqm_2018.ctm_20180601 VALUES ('2018-06-01', %s, 'S0', NULL, %s, %s, %s)",
                            (clock, size, price, corr))
    finally:
        conn.close()
    bars = source(pg).fetch(Request(("S0",), date(2018, 6, 1), date(2018, 6, 1), "1min"))
    assert bars.ts.tolist() == [pd.Timestamp("2018-06-01 13:30", tz="UTC"),  # June: New York = UTC-4
                                pd.Timestamp("2018-06-01 19:59", tz="UTC")]
    ohlcv_by_hand = [[10, 11, 9, 11, 115], [20, 20, 20, 20, 7]]
    assert bars[["open", "high", "low", "close", "volume"]].values.tolist() == ohlcv_by_hand


def stream_peak(src: WrdsSource, request: Request) -> tuple[int, int]:
    """(bars read, peak bytes traced by tracemalloc) while consuming ``src.stream`` chunk by chunk."""
    rows = 0
    tracemalloc.start()
    try:
        for chunk in src.stream(request):
            rows += len(chunk)
        return rows, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def session_bars(request: Request) -> int:
    """Minute bars in the request: every symbol trades every minute of every seeded day."""
    return sum(request.start <= d <= request.end for d in DAYS) * len(SYMBOLS) * 390


def assert_flat(server: PostgresServer, small: Request, large: Request) -> None:
    """The client's peak while streaming ``large`` stays within 1.5× of the peak for ``small``.

    One day per query, and both ranges span several queries: while the generator builds a
    chunk, the loop still holds the one before, so a one-query range would peak lower."""
    src = source(server, days_per_query=1)
    stream_peak(src, small)  # warm-up: imports and SQLAlchemy's caches are paid once
    small_rows, small_peak = stream_peak(src, small)
    large_rows, large_peak = stream_peak(src, large)
    assert (small_rows, large_rows) == (session_bars(small), session_bars(large))
    assert large_peak <= 1.5 * small_peak, f"peak {small_peak / 2**20:.1f} MiB -> {large_peak / 2**20:.1f} MiB"


def test_client_memory_flat_as_range_grows(pg: PostgresServer) -> None:
    """2 days against 5 days of the 1 M trades."""
    assert_flat(pg, Request(SYMBOLS, DAYS[0], DAYS[1], "1min"), Request(SYMBOLS, DAYS[0], DAYS[4], "1min"))


@pytest.mark.slow
def test_client_memory_flat_from_1m_to_4m_trades(pg_4m: PostgresServer) -> None:
    """1 M trades (5 days) against 4 M (20 days)."""
    assert_flat(pg_4m, Request(SYMBOLS, DAYS[0], DAYS[4], "1min"), Request(SYMBOLS, DAYS[0], DAYS[19], "1min"))
