"""WRDS adapter against a real throwaway PostgreSQL (standins/postgres.py).

The cluster starts once for this module and is seeded with generated CRSP-like and TAQ-like
tables; expected bars are computed independently in pandas from the seeded rows. Without
the server binaries the tests fail (tests/standins/ensure_postgres.sh installs them).
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import traceback
from collections.abc import Iterator
from datetime import date, timedelta
from pathlib import Path

import pandas as pd
import pytest

from standins.postgres import (
    PostgresServer,
    PostgresUnavailable,
    WrdsSeed,
    free_port,
    seed_wrds,
    throwaway_postgres,
)
from tasks.config_data import WrdsParams
from tasks.data.sources import Request, SourceError
from tasks.data.sources.wrds import WrdsSource

CRSP_RANGE = (date(2024, 1, 3), date(2024, 1, 11))
TAQ_RANGE = (date(2024, 3, 7), date(2024, 3, 13))  # 03-12 has no table; DST starts 03-10
OPEN, CLOSE = pd.Timedelta(hours=9, minutes=30), pd.Timedelta(hours=16)


@pytest.fixture(scope="module")
def pg() -> Iterator[tuple[PostgresServer, WrdsSeed]]:
    """One seeded throwaway cluster for the module; missing binaries fail the tests, never skip."""
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(throwaway_postgres())
        except PostgresUnavailable as exc:
            reason = str(exc)
        else:
            reason = ""
        if reason:
            pytest.fail(f"throwaway PostgreSQL unavailable: {reason}", pytrace=False)
        yield server, seed_wrds(server)


def source(server: PostgresServer, dataset: str, env: dict[str, str] | None = None, **over: object) -> WrdsSource:
    params = WrdsParams(dataset=dataset, host=server.host, port=server.port, dbname=server.dbname)
    return WrdsSource(params.model_copy(update=over), server.env() if env is None else env)


def expected_crsp(seed: WrdsSeed, symbols: tuple[str, ...], start: date, end: date) -> pd.DataFrame:
    """Ticker → permno by name date range, then the dsf rows in range; close = |prc|."""
    m = seed.names[seed.names.ticker.isin(symbols)].merge(seed.dsf, on="permno")
    m = m[(m.date >= m.namedt) & (m.date <= m.nameenddt) & (m.date >= start) & (m.date <= end)]
    out = pd.DataFrame({"symbol": m.ticker, "ts": pd.to_datetime(m.date).dt.tz_localize("UTC"),
                        "open": m.openprc, "high": m.askhi, "low": m.bidlo, "close": m.prc.abs(), "volume": m.vol})
    return out.sort_values(["symbol", "ts"]).reset_index(drop=True)


def trades_with_symbol(seed: WrdsSeed) -> pd.DataFrame:
    t = seed.trades
    suffix = t.sym_suffix.fillna("")
    return t.assign(symbol=t.sym_root.where(suffix == "", t.sym_root + "." + suffix))


def aggregate(trades: pd.DataFrame, freq: str) -> pd.DataFrame:
    """first/max/min/last price and summed size per symbol per bar, in trade order."""
    t = trades.sort_values(["date", "time_m", "tr_seqnum"])
    day = pd.to_datetime(t.date)
    if freq == "1min":
        ts = (day + t.time_m).dt.floor("min").dt.tz_localize("America/New_York").dt.tz_convert("UTC")
    else:
        ts = day.dt.tz_localize("UTC")
    out = t.assign(ts=ts).groupby(["symbol", "ts"], sort=True).agg(
        open=("price", "first"), high=("price", "max"), low=("price", "min"), close=("price", "last"),
        volume=("size", "sum"))
    return out.reset_index().astype({"volume": "float64", "ts": "datetime64[ns, UTC]"})


def expected_taq(seed: WrdsSeed, symbols: tuple[str, ...], start: date, end: date, freq: str) -> pd.DataFrame:
    t = trades_with_symbol(seed)
    keep = (t.symbol.isin(symbols) & (t.tr_corr == "00") & (t.time_m >= OPEN) & (t.time_m < CLOSE)
            & (t.date >= start) & (t.date <= end))
    return aggregate(t[keep], freq)


def test_crsp_daily_bars_match_seed(pg: tuple[PostgresServer, WrdsSeed]) -> None:
    server, seed = pg
    symbols = ("AAA", "BBB", "CCC")
    bars = source(server, "crsp").fetch(Request(symbols, *CRSP_RANGE, "1d"))
    expected = expected_crsp(seed, symbols, *CRSP_RANGE)
    pd.testing.assert_frame_equal(bars, expected, check_exact=False, rtol=1e-12)
    assert (bars.ts.dt.tz is not None) and (bars.ts == bars.ts.dt.normalize()).all()
    # the seed's negative prc rows are in the window and came back as their absolute value
    in_range = seed.dsf[(seed.dsf.date >= CRSP_RANGE[0]) & (seed.dsf.date <= CRSP_RANGE[1])]
    assert (in_range.prc < 0).any() and (bars.close > 0).all()
    # CCC is permno 10009 until 2024-01-05 and permno 10003 (formerly OLD) after
    ccc = bars[bars.symbol == "CCC"].set_index(bars.ts[bars.symbol == "CCC"].dt.date).close
    dsf = seed.dsf.set_index(["permno", "date"]).prc.abs()
    assert ccc[date(2024, 1, 5)] == pytest.approx(dsf[(10009, date(2024, 1, 5))])
    assert ccc[date(2024, 1, 8)] == pytest.approx(dsf[(10003, date(2024, 1, 8))])


def test_taq_minute_bars_match_pandas_aggregation(pg: tuple[PostgresServer, WrdsSeed]) -> None:
    server, seed = pg
    symbols = ("AAA", "BBB", "BRK.B")
    bars = source(server, "taq").fetch(Request(symbols, *TAQ_RANGE, "1min"))
    expected = expected_taq(seed, symbols, *TAQ_RANGE, "1min")
    pd.testing.assert_frame_equal(bars, expected, check_exact=False, rtol=1e-12)
    assert set(bars.symbol) == set(symbols)  # AAA.WS trades are not AAA
    # New York 09:30-16:00 in UTC: 14:30-21:00 before the DST switch (03-10), 13:30-20:00 after
    by_day = bars.groupby(bars.ts.dt.date).ts.agg(["min", "max"])
    assert sorted(by_day.index) == [date(2024, 3, 7), date(2024, 3, 8), date(2024, 3, 11), date(2024, 3, 13)]
    assert by_day.loc[date(2024, 3, 8), "min"] == pd.Timestamp("2024-03-08 14:30", tz="UTC")
    assert by_day.loc[date(2024, 3, 8), "max"] == pd.Timestamp("2024-03-08 20:59", tz="UTC")
    assert by_day.loc[date(2024, 3, 11), "min"] == pd.Timestamp("2024-03-11 13:30", tz="UTC")
    assert by_day.loc[date(2024, 3, 11), "max"] == pd.Timestamp("2024-03-11 19:59", tz="UTC")


def test_taq_excluded_trades_matter(pg: tuple[PostgresServer, WrdsSeed]) -> None:
    """The seed has corrected and out-of-hours trades that would change the bars if kept."""
    _, seed = pg
    t = trades_with_symbol(seed)
    t = t[t.symbol.isin(["AAA", "BBB", "BRK.B"])]
    assert (t.tr_corr != "00").sum() > 100 and ((t.time_m < OPEN) | (t.time_m >= CLOSE)).sum() > 100
    naive = aggregate(t, "1min")
    assert len(naive) != len(expected_taq(seed, ("AAA", "BBB", "BRK.B"), *TAQ_RANGE, "1min"))


def test_taq_daily_bars(pg: tuple[PostgresServer, WrdsSeed]) -> None:
    server, seed = pg
    bars = source(server, "taq").fetch(Request(("AAA", "BRK.B"), *TAQ_RANGE, "1d"))
    expected = expected_taq(seed, ("AAA", "BRK.B"), *TAQ_RANGE, "1d")
    pd.testing.assert_frame_equal(bars, expected, check_exact=False, rtol=1e-12)
    assert len(bars) == 8 and (bars.ts == bars.ts.dt.normalize()).all()


@pytest.mark.parametrize(("dataset", "rng", "freq"), [("crsp", CRSP_RANGE, "1d"), ("taq", TAQ_RANGE, "1min")])
def test_missing_symbol_is_named(pg: tuple[PostgresServer, WrdsSeed], dataset: str, rng: tuple, freq: str) -> None:
    server, _ = pg
    with pytest.raises(SourceError, match=r"^wrds: symbol\(s\) not found: NOPE \(symbols AAA, NOPE, "):
        source(server, dataset).fetch(Request(("AAA", "NOPE"), *rng, freq))


def test_no_rows_and_no_tables(pg: tuple[PostgresServer, WrdsSeed]) -> None:
    server, _ = pg
    with pytest.raises(SourceError, match="no rows for these symbols and dates"):
        source(server, "crsp").fetch(Request(("AAA",), date(2025, 1, 1), date(2025, 1, 31), "1d"))
    with pytest.raises(SourceError, match=r"no TAQ trade tables .* \(symbols AAA, 2024-03-12\.\.2024-03-12, 1min\)"):
        source(server, "taq").fetch(Request(("AAA",), date(2024, 3, 12), date(2024, 3, 12), "1min"))


def test_sql_error_and_request_errors(pg: tuple[PostgresServer, WrdsSeed]) -> None:
    server, _ = pg
    req = Request(("AAA",), *CRSP_RANGE, "1d")
    with pytest.raises(SourceError, match=r'query failed: relation "crsp.dsf" does not exist'):
        source(server, "crsp", dbname="postgres").fetch(req)
    with pytest.raises(SourceError, match="unknown dataset 'ibes'"):
        WrdsSource(WrdsParams.model_construct(dataset="ibes"), server.env()).fetch(req)
    with pytest.raises(SourceError, match="dataset crsp has daily bars only"):
        source(server, "crsp").fetch(Request(("AAA",), *CRSP_RANGE, "1min"))
    with pytest.raises(SourceError, match="no WRDS username: set WRDS_USERNAME"):
        source(server, "crsp", env={"PGPASSWORD": server.password}).fetch(req)


def _never_prompt(*_: object, **__: object) -> str:
    raise AssertionError("the WRDS adapter prompted for input")


def test_bad_password_never_leaks_or_prompts(pg: tuple[PostgresServer, WrdsSeed], monkeypatch: pytest.MonkeyPatch,
                                             caplog: pytest.LogCaptureFixture) -> None:
    server, _ = pg
    monkeypatch.setattr("builtins.input", _never_prompt)
    monkeypatch.setattr("getpass.getpass", _never_prompt)
    caplog.set_level(logging.DEBUG)
    wrong = f"wrong-{secrets.token_hex(8)}"
    with pytest.raises(SourceError) as info:
        source(server, "crsp", env={"WRDS_USERNAME": server.user, "PGPASSWORD": wrong}).fetch(
            Request(("AAA",), *CRSP_RANGE, "1d"))
    text = str(info.value)
    assert "cannot connect" in text and "password authentication failed" in text and "\n" not in text
    shown = "".join(traceback.format_exception(info.value)) + repr(info.value) + caplog.text
    assert wrong not in shown and server.password not in shown


def test_server_down_is_source_error_without_password(pg: tuple[PostgresServer, WrdsSeed],
                                                      caplog: pytest.LogCaptureFixture) -> None:
    server, _ = pg
    caplog.set_level(logging.DEBUG)
    with pytest.raises(SourceError, match=r"cannot connect to 127\.0\.0\.1:\d+/wrds as podracer: .*refused") as info:
        source(server, "taq", port=free_port()).fetch(Request(("AAA",), *TAQ_RANGE, "1min"))
    shown = "".join(traceback.format_exception(info.value)) + caplog.text
    assert server.password not in shown


def test_password_from_pgpass(pg: tuple[PostgresServer, WrdsSeed], tmp_path: Path,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    server, _ = pg
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.delenv("PGPASSFILE", raising=False)
    request = Request(("BBB",), CRSP_RANGE[0], CRSP_RANGE[0] + timedelta(days=7), "1d")
    with pytest.raises(SourceError, match="no password supplied"):  # no PGPASSWORD, no ~/.pgpass yet
        source(server, "crsp", env={"WRDS_USERNAME": server.user, "HOME": str(tmp_path)}).fetch(request)
    pgpass = tmp_path / ".pgpass"
    pgpass.write_text(f"{server.host}:{server.port}:{server.dbname}:{server.user}:{server.password}\n")
    pgpass.chmod(0o600)
    wrds = source(server, "crsp", env={"WRDS_USERNAME": server.user, "HOME": str(tmp_path)})
    bars = wrds.fetch(request)
    assert len(bars) == 6 and set(bars.symbol) == {"BBB"}  # Wed 01-03 .. Wed 01-10
    assert server.password not in repr(wrds)
