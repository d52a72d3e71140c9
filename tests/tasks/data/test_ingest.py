import pandas as pd
import pytest

from standins.tiny import tiny_params
from tasks.data.bars import read_parquet
from tasks.data.ingest import MANIFEST, ingest
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
