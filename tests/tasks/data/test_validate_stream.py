"""Validation streams the raw files in batches of whole symbols (docs/data.md, validation): the
result must not depend on how the files are batched, and files that share or interleave
symbols must be checked together."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from standins.tiny import tiny_params
from tasks.calendar import nyse_sessions
from tasks.data import validate as stage
from tasks.data.bars import read_parquet
from tasks.data.coverage import BarTimes, real_bars
from tasks.data.ingest import ingest
from tasks.data.validate import REPORT, VALIDATED, RawFile, batches, validate
from tasks.errors import DataError, ValidationFailed


def edit(path: Path, row: int, **values: float) -> None:
    frame = pd.read_parquet(path)
    for column, value in values.items():
        frame.loc[row, column] = value
    frame.to_parquet(path)


def outputs(params) -> tuple[pd.DataFrame, str, dict[str, pd.DataFrame]]:
    quarantine = {p.name: read_parquet(p)[0] for p in sorted(params.dirs.quarantine.glob("*.parquet"))}
    return read_parquet(params.dirs.validated / VALIDATED)[0], (params.dirs.quarantine / REPORT).read_text(), quarantine


def test_one_batch_per_file_gives_what_one_batch_for_all_gives(tmp_path, monkeypatch):
    """Bad rows, hard-limit rows, many flags (the report keeps the biggest 20 of all batches) and
    a tie between two gaps: every output is the same whichever way the files are batched."""
    params = tiny_params(tmp_path, "validation.max_bad_fraction=0.01", "validation.outlier_sigma=0.5",
                         "validation.max_gap_bars=10")
    ingest(params)
    raw = params.dirs.raw
    edit(raw / "SYN000.parquet", 3, open=-5.0)
    edit(raw / "SYN001.parquet", 9, volume=-1.0)
    edit(raw / "SYN002.parquet", 40, close=1e12, high=1e12)
    for name in ("SYN001.parquet", "SYN003.parquet"):  # the same 2-session gap in two files
        frame = pd.read_parquet(raw / name)
        frame.drop(index=[100, 101]).to_parquet(raw / name)
    whole = validate(params)
    expected = outputs(params)
    assert whole.quarantined == 3 and "| log return beyond validation.max_abs_log_return | 1 |" in expected[1]
    monkeypatch.setattr(stage, "GX_CHUNK_ROWS", 1)  # every file a batch of its own
    assert len(batches([stage.survey(p) for p in sorted(raw.glob("*.parquet"))], 1)) == 4
    assert validate(params) == whole
    got = outputs(params)
    pd.testing.assert_frame_equal(got[0], expected[0])
    assert got[1] == expected[1]
    assert got[2].keys() == expected[2].keys()
    for name in got[2]:
        pd.testing.assert_frame_equal(got[2][name], expected[2][name])
    # the tie: both files miss 2 sessions; the first file's symbol is named, in either batching
    strict = tiny_params(tmp_path, "validation.max_bad_fraction=0.01", "validation.max_gap_bars=1")
    with pytest.raises(ValidationFailed, match=r"SYN001\.parquet: SYN001 misses 2 sessions"):
        validate(strict)


def test_a_duplicate_across_two_files_quarantines_both_copies(tmp_path, monkeypatch):
    params = tiny_params(tmp_path, "validation.max_bad_fraction=0.01")
    ingest(params)
    raw = params.dirs.raw
    frame = pd.read_parquet(raw / "SYN001.parquet")
    frame.iloc[[7]].to_parquet(raw / "SYN001_extra.parquet")  # one of SYN001's bars again, in another file
    monkeypatch.setattr(stage, "GX_CHUNK_ROWS", 1)
    result = validate(params)
    assert result.quarantined == 2
    for name in ("SYN001.parquet", "SYN001_extra.parquet"):
        quarantined, _ = read_parquet(params.dirs.quarantine / name)
        assert quarantined["ts"].tolist() == [frame.loc[7, "ts"]]
        assert quarantined["reason"].iloc[0] == "duplicate (symbol, ts)"


def test_files_whose_symbols_interleave_validate_sorted(tmp_path, monkeypatch):
    params = tiny_params(tmp_path)
    ingest(params)
    raw = params.dirs.raw
    first = pd.concat([pd.read_parquet(raw / f"SYN00{i}.parquet") for i in (2, 0)], ignore_index=True)
    (raw / "SYN000.parquet").unlink()
    first.to_parquet(raw / "SYN002.parquet")  # SYN000 and SYN002 in one file, SYN001 between them in another
    monkeypatch.setattr(stage, "GX_CHUNK_ROWS", 1)
    validate(params)
    passed, _ = read_parquet(params.dirs.validated / VALIDATED)
    key = passed[["symbol", "ts"]]
    assert key.equals(key.sort_values(["symbol", "ts"]).reset_index(drop=True))
    assert passed["symbol"].unique().tolist() == ["SYN000", "SYN001", "SYN002", "SYN003"]


def raw_file(name: str, rows: int, first: str | None, last: str | None = None) -> RawFile:
    return RawFile(Path(name), rows, None if first is None else (first, last or first))


def test_batches_hold_whole_symbols_in_symbol_order_up_to_the_row_budget():
    files = [raw_file("a", 3, "DDD"), raw_file("b", 3, "AAA"), raw_file("c", 2, "BBB", "EEE"),
             raw_file("d", 4, "FFF"), raw_file("e", 4, "GGG"), raw_file("f", 0, None), raw_file("g", 9, "HHH")]
    plan = [[f.path.name for f in batch] for batch in batches(files, max_rows=8)]
    # f cannot be surveyed: first, alone. c (BBB..EEE) spans a (DDD): one group of 5 rows, after b's AAA;
    # b + (a, c) = 8 rows fill a batch; d + e = 8; g alone exceeds the budget
    assert plan == [["f"], ["a", "b", "c"], ["d", "e"], ["g"]]
    assert [[f.path.name for f in b] for b in batches(files[:2], max_rows=100)] == [["a", "b"]]
    assert batches([], max_rows=8) == []


def test_a_failed_run_leaves_no_validated_file_and_no_temporary_one(tmp_path):
    params = tiny_params(tmp_path)
    ingest(params)
    validate(params)
    assert (params.dirs.validated / VALIDATED).exists()
    (params.dirs.raw / "SYN003.parquet").write_bytes(b"not parquet")
    with pytest.raises(DataError, match=r"SYN003.parquet: unreadable Parquet"):
        validate(params)
    assert list(params.dirs.validated.iterdir()) == []


def test_bar_times_kept_as_bits_over_two_calendars_give_the_panels_real_mask():
    """Batches record their symbols' times over calendars of their own range; the panel is built
    over the whole range at the end."""
    days = nyse_sessions(pd.Timestamp("2021-01-04").date(), pd.Timestamp("2021-03-31").date())
    ts = days.asi8
    aaa, bbb = ts[[0, 1, 5, 9]], ts[[20, 22, 23, 40]]
    times = BarTimes()
    times.add("BBB", bbb, ts[20:41])  # its batch's calendar starts later
    times.add("AAA", aaa, ts[:10])
    real, stamps, symbols = times.real(ts)
    frame = pd.DataFrame({"symbol": ["AAA"] * 4 + ["BBB"] * 4,
                          "ts": pd.to_datetime(np.concatenate([aaa, bbb]), utc=True)})
    expected = real_bars(frame)
    np.testing.assert_array_equal(real, expected[0])
    assert stamps.equals(expected[1]) and symbols == expected[2] == ["AAA", "BBB"]
    assert real.sum(axis=0).tolist() == [4, 4] and len(stamps) == 8
    assert times.span() == (pd.Timestamp(ts[0], tz="UTC"), pd.Timestamp(ts[40], tz="UTC"))
