import pandas as pd
import pytest

from tasks.data.bars import read_parquet
from tasks.data.ingest import ingest
from tasks.data.validate import REPORT, VALIDATED, validate
from tasks.errors import ValidationFailed
from tests.conftest import tiny_params


def edit(path, row, **values):
    frame = pd.read_parquet(path)
    for column, value in values.items():
        frame.loc[row, column] = value
    frame.to_parquet(path)
    return frame.loc[row]


def test_clean_data_passes_whole(tiny):
    rows = ingest(tiny).rows
    result = validate(tiny)
    assert (result.rows_in, result.rows_out, result.quarantined) == (rows, rows, 0)
    assert len(read_parquet(tiny.dirs.validated / VALIDATED)[0]) == rows


def test_high_below_low_stops_with_one_line_and_quarantines_the_row(tiny):
    ingest(tiny)
    validate(tiny)
    path = tiny.dirs.raw / "SYN002.parquet"
    row = edit(path, 7, high=1.0, low=2.0)
    with pytest.raises(ValidationFailed) as err:
        validate(tiny)
    message = str(err.value)
    assert "\n" not in message
    assert f"{path}: 1 (" in message and "high < low" in message
    quarantined, _ = read_parquet(tiny.dirs.quarantine / "SYN002.parquet")
    assert len(quarantined) == 1 and quarantined.loc[0, "ts"] == row["ts"]
    assert "high < low" in quarantined.loc[0, "reason"]
    assert not (tiny.dirs.validated / VALIDATED).exists()  # no stale output for downstream
    assert "SYN002.parquet | 1 |" in (tiny.dirs.quarantine / REPORT).read_text()


def test_rows_in_equal_rows_out_plus_quarantined(tmp_path):
    params = tiny_params(tmp_path, "validation.max_bad_fraction=0.01")
    ingest(params)
    raw = params.dirs.raw
    edit(raw / "SYN000.parquet", 1, open=-5.0)
    edit(raw / "SYN001.parquet", 2, volume=-1.0)
    edit(raw / "SYN003.parquet", 4, close=float("nan"))
    frame = pd.read_parquet(raw / "SYN002.parquet")
    pd.concat([frame, frame.iloc[[5]]]).to_parquet(raw / "SYN002.parquet")  # a duplicate row
    result = validate(params)
    assert result.rows_in == result.rows_out + result.quarantined
    assert result.quarantined == 5  # both copies of the duplicate
    reasons = pd.concat(read_parquet(p)[0] for p in params.dirs.quarantine.glob("*.parquet"))["reason"]
    assert {"open <= 0", "volume < 0", "null close", "duplicate (symbol, ts)"} <= set("; ".join(reasons).split("; "))
