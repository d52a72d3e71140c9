from pathlib import Path

import pandas as pd
import pytest

from standins.tiny import tiny_params
from tasks.data.bars import read_parquet
from tasks.data.ingest import MANIFEST, NO_SYMBOL, content_digest, ingest
from tasks.data.validate import validate
from tasks.errors import DataError


def test_synthetic_ingest_writes_one_file_per_symbol(tiny):
    result = ingest(tiny)
    assert not result.reused and result.symbols == 4
    assert sorted(p.name for p in tiny.dirs.raw.glob("*.parquet")) == [f"SYN00{i}.parquet" for i in range(4)]
    assert (tiny.dirs.raw / MANIFEST).exists()
    frame, freq = read_parquet(tiny.dirs.raw / "SYN000.parquet")
    assert freq == "1d" and set(frame["symbol"]) == {"SYN000"}
    assert sum(len(read_parquet(p)[0]) for p in result.files) == result.rows


def test_second_ingest_reuses_data_and_an_edit_changes_the_version(tiny):
    first = ingest(tiny)
    again = ingest(tiny)
    assert again.reused and again.data_version == first.data_version
    path = tiny.dirs.raw / "SYN001.parquet"
    frame = pd.read_parquet(path)
    frame.loc[3, "close"] *= 1.01
    frame.to_parquet(path)
    edited = ingest(tiny)
    assert edited.reused and edited.data_version != first.data_version
    assert pd.read_parquet(path).loc[3, "close"] == frame.loc[3, "close"]  # raw stays as the user left it


def test_a_new_spec_replaces_the_raw_data(tmp_path):
    ingest(tiny_params(tmp_path))
    result = ingest(tiny_params(tmp_path, "data.symbols=2"))
    assert not result.reused and len(list((tmp_path / "data" / "raw").glob("*.parquet"))) == 2


def test_file_source_with_column_mapping(tmp_path):
    csv = tmp_path / "bars.csv"
    pd.DataFrame({
        "Date": ["2021-01-05T00:00:00Z", "2021-01-04T00:00:00Z"], "Ticker": ["AAA", "AAA"],
        "O": [10.0, 9.0], "H": [11.0, 10.0], "L": [9.5, 8.5], "C": [10.5, 9.5], "V": [100, 200],
    }).to_csv(csv, index=False)
    mapping = "{Date: ts, Ticker: symbol, O: open, H: high, L: low, C: close, V: volume}"
    params = tiny_params(tmp_path, "data.source=file", f"data.path={csv}", f"data.columns={mapping}")
    result = ingest(params)
    frame, _ = read_parquet(result.files[0])
    assert list(frame["close"]) == [9.5, 10.5]  # sorted by ts
    assert str(frame["ts"].dtype) == "datetime64[ns, UTC]"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("ts,symbol,open,high,low,close\n2021-01-04T00:00:00Z,A,1,1,1,1\n", "missing column(s) volume"),
        ("ts,symbol,open,high,low,close,volume\n2021-01-04 15:30,A,1,1,1,1,1\n", "no time zone (line 2: "
         "2021-01-04 15:30:00); set data.timezone"),
        ("ts,symbol,open,high,low,close,volume\n2021-01-04T00:00:00Z,A,x,1,1,1,1\n", "line 2, column open: 'x' is not "
         "a number"),
        ("ts,symbol,open,high,low,close,volume\n", "no rows"),
        ("", "empty file"),
        ("ts,symbol,open,high,low,close,volume\n2021-01-04T00:00:00Z,../x,1,1,1,1,1\n", "'../x' is not a ticker"),
    ],
)
def test_bad_files_are_one_line_errors(tmp_path, content, expected):
    csv = tmp_path / "bad.csv"
    csv.write_text(content)
    with pytest.raises(DataError) as err:
        ingest(tiny_params(tmp_path, "data.source=file", f"data.path={csv}"))
    assert expected in str(err.value) and str(csv) in str(err.value)
    assert not (tmp_path / "data" / "raw").exists()  # nothing half-written


def write_bars(path: Path, closes: list[float], symbols: tuple[str | None, ...] = ("AAA",)) -> None:
    days = ["2021-01-04", "2021-01-05", "2021-01-06"][: len(closes)]
    pd.DataFrame([{"ts": d, "symbol": s, "open": c, "high": c, "low": c, "close": c, "volume": 100}
                  for s in symbols for d, c in zip(days, closes, strict=True)]).to_csv(path, index=False)


def test_a_changed_file_at_the_same_path_is_ingested_again(tmp_path):
    """The spec of a file source includes its content: by its path alone, an edited or
    replaced file would reuse the raw data of the old one."""
    csv = tmp_path / "bars.csv"
    write_bars(csv, [10.0, 11.0])
    params = tiny_params(tmp_path, "data.source=file", f"data.path={csv}")
    first = ingest(params)
    assert ingest(params).reused  # the same content: reused
    write_bars(csv, [10.0, 12.0])
    changed = ingest(params)
    assert not changed.reused and changed.data_version != first.data_version
    assert list(read_parquet(tmp_path / "data" / "raw" / "AAA.parquet")[0]["close"]) == [10.0, 12.0]
    write_bars(csv, [10.0, 11.0])  # the first content again: the first data version, written afresh
    again = ingest(params)
    assert not again.reused and again.data_version == first.data_version


def test_the_same_content_elsewhere_digests_the_same_and_a_folder_digests_every_file(tmp_path):
    a, b = tmp_path / "a" / "bars.csv", tmp_path / "b" / "bars.csv"
    for path in (a, b):
        path.parent.mkdir()
        write_bars(path, [10.0, 11.0])
    assert content_digest(a) == content_digest(b)
    folder = tmp_path / "parts"
    (folder / "symbol=AAA").mkdir(parents=True)
    (folder / "symbol=AAA" / "part-0.parquet").write_bytes(b"one")
    before = content_digest(folder)
    (folder / "symbol=AAA" / "part-0.parquet").write_bytes(b"two")
    assert content_digest(folder) != before
    assert content_digest(tmp_path / "nothing.csv") == "unreadable"  # reading it names the problem


def test_rows_without_a_symbol_reach_validation_apart_from_every_ticker(tmp_path):
    """docs/data.md: an empty cell is a missing value and its row is quarantined ("null symbol"),
    never a ticker named 'nan'."""
    csv = tmp_path / "bars.csv"
    write_bars(csv, [10.0, 11.0, 12.0], symbols=("AAA", None))
    params = tiny_params(tmp_path, "data.source=file", f"data.path={csv}", "validation.max_bad_fraction=0.5")
    result = ingest(params)
    assert result.symbols == 1 and result.rows == 6
    raw = tmp_path / "data" / "raw"
    assert sorted(p.name for p in raw.glob("*.parquet")) == ["AAA.parquet", f"{NO_SYMBOL}.parquet"]
    checked = validate(params)
    assert (checked.rows_in, checked.rows_out, checked.quarantined) == (6, 3, 3)
    quarantined = pd.read_parquet(tmp_path / "data" / "quarantine" / f"{NO_SYMBOL}.parquet")
    assert quarantined["symbol"].isna().all() and set(quarantined["reason"]) == {"null symbol"}


def test_a_requested_ticker_the_file_lacks_is_named_as_the_fetched_sources_name_it(tmp_path):
    csv = tmp_path / "bars.csv"
    write_bars(csv, [10.0, 11.0], symbols=("AAA", "BBB"))
    with pytest.raises(DataError) as err:
        ingest(tiny_params(tmp_path, "data.source=file", f"data.path={csv}", "data.tickers=[AAA,CCC,BBB,DDD]"))
    assert str(err.value) == (f"{csv}: no bars for CCC, DDD of data.tickers (unknown symbol, or no data in "
                              "data.start..data.end)")
    assert not (tmp_path / "data" / "raw").exists()
