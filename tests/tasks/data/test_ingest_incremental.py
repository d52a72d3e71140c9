"""Fetched sources are ingested incrementally: only missing (symbols, range) pieces."""

from datetime import date

import pandas as pd
import pytest

from standins.tiny import tiny_params
from tasks.calendar import nyse_sessions
from tasks.data import ingest as stage
from tasks.data.bars import read_parquet
from tasks.data.ingest import missing_pieces
from tasks.data.sources import Request


class FakeSource:
    """Deterministic bars per (symbol, day); records every request."""

    name = "yahoo"
    default_symbols = ()

    def __init__(self) -> None:
        self.requests: list[Request] = []

    def fetch(self, request: Request) -> pd.DataFrame:
        self.requests.append(request)
        days = nyse_sessions(request.start, request.end)
        return pd.DataFrame([
            {"symbol": s, "ts": d, "open": 10.0 + i, "high": 12.0 + i, "low": 9.0 + i, "close": 11.0 + i,
             "volume": 100.0} for s in request.symbols for i, d in enumerate(days)])


def test_missing_pieces_batches_symbols_and_keeps_coverage_contiguous():
    cov = {"A": (date(2021, 1, 1), date(2021, 6, 30)), "B": (date(2021, 3, 1), date(2021, 12, 31))}
    pieces = missing_pieces(cov, ("A", "B", "C"), date(2021, 1, 1), date(2021, 12, 31))
    assert pieces == {
        (date(2021, 7, 1), date(2021, 12, 31)): ["A"],
        (date(2021, 1, 1), date(2021, 2, 28)): ["B"],
        (date(2021, 1, 1), date(2021, 12, 31)): ["C"],
    }
    assert missing_pieces(cov, ("A",), date(2021, 2, 1), date(2021, 5, 1)) == {}


@pytest.fixture
def fake(monkeypatch):
    source = FakeSource()
    monkeypatch.setattr(stage, "make_source", lambda data: source)
    return source


def params(tmp_path, tickers, start, end):
    return tiny_params(tmp_path, "data.source=yahoo", f"data.tickers={tickers}", f"data.start={start}",
                       f"data.end={end}")


def test_only_missing_pieces_are_fetched_and_merged(tmp_path, fake):
    first = stage.ingest(params(tmp_path, "[AAA, BBB]", "2021-01-01", "2021-03-31"))
    assert [r.symbols for r in fake.requests] == [("AAA", "BBB")] and not first.reused
    again = stage.ingest(params(tmp_path, "[AAA, BBB]", "2021-02-01", "2021-03-31"))
    assert again.reused and len(fake.requests) == 1 and again.data_version == first.data_version
    grown = stage.ingest(params(tmp_path, "[AAA, BBB, CCC]", "2021-01-01", "2021-05-31"))
    assert [(r.symbols, r.start, r.end) for r in fake.requests[1:]] == [
        (("CCC",), date(2021, 1, 1), date(2021, 5, 31)),
        (("AAA", "BBB"), date(2021, 4, 1), date(2021, 5, 31)),
    ]
    bars, _ = read_parquet(tmp_path / "data" / "raw" / "AAA.parquet")
    assert bars["ts"].is_monotonic_increasing and not bars.duplicated(["ts"]).any()
    assert len(bars) == len(nyse_sessions(date(2021, 1, 1), date(2021, 5, 31)))
    assert grown.symbols == 3 and grown.data_version != first.data_version


def test_dropping_a_symbol_removes_its_file(tmp_path, fake):
    stage.ingest(params(tmp_path, "[AAA, BBB]", "2021-01-01", "2021-03-31"))
    result = stage.ingest(params(tmp_path, "[AAA]", "2021-01-01", "2021-03-31"))
    assert [f.name for f in result.files] == ["AAA.parquet"] and len(fake.requests) == 1
