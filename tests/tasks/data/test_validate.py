import logging
import os
import time

import great_expectations  # noqa: F401  (imported at collection: mutation workers then fork with it loaded)
import numpy as np
import pandas as pd
import pytest

from standins.tiny import tiny_params
from tasks.caching import current_version
from tasks.data.bars import BarsWriter, read_parquet, recorded_version, write_parquet
from tasks.data.ingest import ingest
from tasks.data.suite import row_failures, symbol_chunks
from tasks.data.validate import ABANDONED, REPORT, VALIDATED, validate
from tasks.errors import DataError, MissingInput, ValidationFailed


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
    # a gap-free panel: only each symbol's own 120-bar warm-up (features.min_history 121) is masked
    assert (result.panel_bars * result.panel_symbols, result.panel_symbols) == (rows, 4)
    assert (result.masked_cells, result.warmup_cells, result.never_tradable) == (4 * 120, 4 * 120, ())
    assert ("Every symbol has a real bar at every panel bar: nothing is masked beyond each symbol's own warm-up "
            "(120 bars).\n") in result.report.read_text()


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


def test_the_last_validated_set_stays_readable_until_the_new_one_replaces_it(tiny, monkeypatch):
    """The paper broker reads its prices from the validated file on every request: a run in
    progress must not take it away."""
    ingest(tiny)
    validate(tiny)
    out = tiny.dirs.validated / VALIDATED
    before, _ = read_parquet(out)
    edit(tiny.dirs.raw / "SYN001.parquet", 3, volume=123.0)
    seen = []
    write = BarsWriter.write

    def watched(self, frame):
        seen.append(read_parquet(out)[0].equals(before))  # mid-run: the last set, whole
        write(self, frame)

    monkeypatch.setattr(BarsWriter, "write", watched)
    validate(tiny)
    after, _ = read_parquet(out)
    assert seen and all(seen)
    assert not after.equals(before) and (after["volume"] == 123.0).sum() == 1


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


def test_every_row_lands_once_in_validated_or_quarantine_with_its_values(tmp_path):
    """Not only the counts: the quarantined rows are exactly the broken ones, values and all."""
    params = tiny_params(tmp_path, "validation.max_bad_fraction=0.01")
    ingest(params)
    raw = params.dirs.raw
    broken = {("SYN000", edit(raw / "SYN000.parquet", 3, open=-5.0)["ts"]),
              ("SYN001", edit(raw / "SYN001.parquet", 9, volume=-1.0)["ts"]),
              ("SYN001", edit(raw / "SYN001.parquet", 10, high=1.0, low=2.0)["ts"])}
    before = pd.concat(read_parquet(p)[0] for p in sorted(raw.glob("*.parquet")))
    validate(params)
    quarantined = pd.concat(read_parquet(p)[0] for p in sorted(params.dirs.quarantine.glob("*.parquet")))
    assert set(zip(quarantined["symbol"], quarantined["ts"])) == broken and len(quarantined) == 3
    passed, _ = read_parquet(params.dirs.validated / VALIDATED)
    key = ["symbol", "ts"]
    both = pd.concat([passed, quarantined.drop(columns="reason")]).sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(both, before.sort_values(key).reset_index(drop=True), check_dtype=False)
    assert quarantined.set_index(key).loc[("SYN001", min(ts for s, ts in broken if s == "SYN001")), "reason"] == \
        "volume < 0"


def one_bad_row_per_rule() -> tuple[pd.DataFrame, dict[int, str]]:
    """A clean daily frame of two symbols, then one row broken for each rule of the suite."""
    days = pd.date_range("2021-01-04", periods=10, freq="B", tz="UTC")
    rows = [{"symbol": s, "ts": d, "open": 10.0, "high": 11.0, "low": 9.0, "close": 10.5, "volume": 100.0}
            for s in ("AAA", "BBB") for d in days]
    frame = pd.DataFrame(rows)
    broken = {
        0: ({"open": None}, "null open; high < open; low > open"),  # a null also fails its comparisons
        1: ({"volume": None}, "null volume"), 2: ({"close": 0.0, "low": 0.0}, "close <= 0; low <= 0"),
        3: ({"low": -1.0}, "low <= 0"), 4: ({"high": 10.2}, "high < close"),
        5: ({"high": 9.9, "close": 9.8}, "high < open"),
        6: ({"low": 10.2}, "low > open"), 7: ({"low": 10.6, "open": 10.7, "high": 11.0}, "low > close"),
        8: ({"volume": -5.0}, "volume < 0"), 10: ({"high": 8.0}, "high < open; high < close; high < low"),
        11: ({"symbol": None}, "null symbol"), 12: ({"ts": None}, "null ts"),
    }
    for row, (values, _) in broken.items():
        for column, value in values.items():
            frame.loc[row, column] = value
    frame.loc[19, ["open", "high", "low", "close"]] = 10.0  # a flat bar is no failure: the bounds are inclusive
    frame.loc[18, "volume"] = 0.0  # nor a bar without trades (a halt, a holiday-thin session)
    dup = frame.iloc[[15]]  # a duplicate (symbol, ts): both copies are bad
    frame = pd.concat([frame, dup], ignore_index=True)
    expected = {row: reason for row, (_, reason) in broken.items()}
    expected[15] = expected[20] = "duplicate (symbol, ts)"
    return frame, expected


def test_each_rule_of_the_suite_names_exactly_its_rows():
    frame, expected = one_bad_row_per_rule()
    got = row_failures(frame)
    assert {i: sorted(r.split("; ")) for i, r in got.items()} == {i: sorted(r.split("; ")) for i, r in expected.items()}


def test_the_suite_runs_without_progress_bars_or_context_chatter(caplog, capsys):
    caplog.set_level(logging.INFO)
    row_failures(one_bad_row_per_rule()[0])
    assert [r for r in caplog.records if r.name == "great_expectations.data_context.types.base"] == []
    assert "Calculating Metrics" not in capsys.readouterr().err


def test_symbols_are_validated_in_chunks_of_whole_symbols():
    symbols = pd.Series(["BBB"] * 3 + ["AAA"] * 2 + ["CCC"] * 4 + ["DDD"] * 7)
    chunks = [c.tolist() for c in symbol_chunks(symbols, max_rows=5)]
    # AAA (2) + BBB (3) fill a chunk exactly; CCC (4) starts the next; DDD (7) alone exceeds the limit
    assert chunks == [[3, 4, 0, 1, 2], [5, 6, 7, 8], list(range(9, 16))]
    assert [c.tolist() for c in symbol_chunks(symbols.iloc[:5], max_rows=100)] == [[3, 4, 0, 1, 2]]
    assert list(symbol_chunks(pd.Series([], dtype=object))) == []


def test_the_report_counts_rows_checks_files_and_flags(tmp_path):
    params = tiny_params(tmp_path, "validation.max_bad_fraction=0.01")
    ingest(params)
    edit(params.dirs.raw / "SYN001.parquet", 4, volume=-1.0)
    edit(params.dirs.raw / "SYN001.parquet", 6, high=1.0, low=2.0)
    result = validate(params)
    report = result.report.read_text()
    assert report.startswith(f"# Validation report\n\n- rows in: {result.rows_in}\n- rows quarantined: 2\n"
                             f"- rows out: {result.rows_in - 2}\n")
    assert "- return outliers flagged (kept): 1\n" in report
    assert ("| check | rows |\n|---|---|\n| volume < 0 | 1 |\n| high < open | 1 |\n| high < close | 1 |\n"
            "| high < low | 1 |\n") in report
    assert (f"\n\n| file | rows | reasons |\n|---|---|---|\n| {params.dirs.raw / 'SYN001.parquet'} | 2 | high < close, "
            "high < low, high < open, volume < 0 |\n\n| symbol") in report
    # the seeded market's one big move, flagged and kept; then the coverage of the kept bars
    assert ("| symbol | ts | log return | robust z |\n|---|---|---|---|\n"
            "| SYN003 | 2021-06-18 00:00:00+00:00 | -0.1237 | 12.4 |\n\n## Coverage\n") in report
    # the two quarantined rows leave SYN001 two gaps: counted, not silent
    bars = result.rows_out // 4 + 1
    assert f"- masked symbol-bars: {4 * 120 + 2} of {4 * bars} (listed late 0, gaps 2, stopped early 0, " \
           "warm-up 480)\n" in report
    assert report.endswith(f"|---|---|---|---|---|---|---|---|---|\n| SYN001 | 2020-01-02 | 2021-12-31 | {bars - 2} "
                           f"| 0 | 2 | 0 | 120 | {bars - 122} |\n")
    assert (result.masked_cells, result.masked_beyond_warmup, result.never_tradable) == (482, 2, ())


def test_a_file_of_many_symbols_in_any_order_validates_sorted_and_only_bad_files_are_quarantined(tmp_path):
    params = tiny_params(tmp_path, "validation.max_bad_fraction=0.01")
    ingest(params)
    raw = params.dirs.raw
    together = pd.concat([pd.read_parquet(raw / f"SYN00{i}.parquet") for i in (3, 2)], ignore_index=True)
    (raw / "SYN002.parquet").unlink()
    together.to_parquet(raw / "SYN003.parquet")  # SYN003's rows, then SYN002's, in one file
    edit(raw / "SYN000.parquet", 2, volume=-1.0)
    result = validate(params)
    assert result.path == params.dirs.validated / VALIDATED
    passed, _ = read_parquet(result.path)
    keys = ["symbol", "ts"]
    assert passed[keys].equals(passed.sort_values(keys)[keys].reset_index(drop=True))
    assert sorted(p.name for p in params.dirs.quarantine.glob("*.parquet")) == ["SYN000.parquet"]


def test_too_many_bad_rows_name_each_file_with_its_count_and_reasons(tmp_path):
    params = tiny_params(tmp_path)
    ingest(params)
    raw = params.dirs.raw
    edit(raw / "SYN000.parquet", 2, volume=-1.0)
    edit(raw / "SYN001.parquet", 3, open=-1.0)
    edit(raw / "SYN001.parquet", 4, volume=-2.0)
    with pytest.raises(ValidationFailed) as err:
        validate(params)
    assert str(err.value) == (f"validation failed: 3 of 2020 rows bad in {raw / 'SYN000.parquet'}: 1 (volume < 0); "
                              f"{raw / 'SYN001.parquet'}: 2 (low > open, open <= 0, volume < 0); "
                              f"quarantined in {params.dirs.quarantine}/")


def test_raw_files_that_cannot_be_validated_are_one_line_errors(tmp_path):
    params = tiny_params(tmp_path)
    with pytest.raises(MissingInput) as err:
        validate(params)
    assert str(err.value) == f"{params.dirs.raw}: no Parquet files (run `podracer ingest` first)"
    ingest(params)
    path = params.dirs.raw / "SYN001.parquet"
    frame, _ = read_parquet(path)
    write_parquet(frame, path, "1min")
    with pytest.raises(DataError) as err:
        validate(params)
    assert str(err.value) == f"{path}: holds 1min bars but data.freq is 1d"
    write_parquet(frame.iloc[:0], path, "1d")
    with pytest.raises(DataError) as err:
        validate(params)
    assert str(err.value) == f"{path}: no rows"
    write_parquet(frame.drop(columns="volume"), path, "1d")
    with pytest.raises(DataError, match=rf"^{path}: missing column"):
        validate(params)
    write_parquet(frame.assign(ts=frame["ts"] + pd.Timedelta(hours=1)), path, "1d")
    with pytest.raises(DataError) as err:
        validate(params)
    assert str(err.value) == (f"{path}: {len(frame)} intraday timestamps in daily bars (mixed frequencies?), "
                              "first at row 0")


def test_the_report_lists_the_twenty_biggest_flags_biggest_first(tmp_path):
    params = tiny_params(tmp_path, "validation.outlier_sigma=0.5")
    ingest(params)
    report = validate(params).report.read_text().splitlines()
    flagged = int(report[5].removeprefix("- return outliers flagged (kept): "))
    table = report[report.index("| symbol | ts | log return | robust z |") + 2:report.index("## Coverage") - 1]
    assert flagged > 20 and len(table) == 20
    z = [float(row.split(" | ")[-1].rstrip(" |")) for row in table]
    assert z == sorted(z, reverse=True) and z[0] > z[-1]  # biggest first, not the smallest 20


def test_the_validated_file_records_its_raw_data_version_and_stale_temporaries_are_cleared(tiny):
    """Features checks the record against data/raw (docs/data.md, validation); a killed run
    leaves a temporary beside the validated file, which no reader opens and the next run removes."""
    version = ingest(tiny).data_version
    stale = tiny.dirs.validated / f".{VALIDATED}.killed.tmp"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"half a file")
    other = tiny.dirs.validated / f".{VALIDATED}.under-way.tmp"  # another run's, written a moment ago
    other.write_bytes(b"a file being written")
    old = time.time() - ABANDONED - 1
    os.utime(stale, (old, old))
    validate(tiny)
    assert recorded_version(tiny.dirs.validated / VALIDATED) == version == current_version(tiny)
    assert sorted(p.name for p in tiny.dirs.validated.iterdir()) == sorted([VALIDATED, other.name])


def test_an_infinite_or_absurd_open_is_quarantined_before_it_can_be_a_fill_price(tmp_path):
    params = tiny_params(tmp_path, "validation.max_bad_fraction=0.01")
    ingest(params)
    path = params.dirs.raw / "SYN001.parquet"
    frame = pd.read_parquet(path)
    frame.loc[10, ["open", "high"]] = float("inf")
    frame.loc[20, "open"] = frame.loc[19, "close"] * 100  # a gap of ln(100) = +4.61 from the last close
    frame.loc[20, "high"] = frame.loc[20, "open"]
    frame.to_parquet(path)
    result = validate(params)
    assert result.quarantined == 2
    quarantined = read_parquet(params.dirs.quarantine / "SYN001.parquet")[0].set_index("ts")["reason"]
    assert quarantined[frame.loc[10, "ts"]] == "open not finite; high not finite"
    assert quarantined[frame.loc[20, "ts"]] == (
        f"log return beyond validation.max_abs_log_return: SYN001 {frame.loc[20, 'ts']} open gap (log open / "
        "previous close) +4.61 beyond ±3")
    kept = read_parquet(params.dirs.validated / VALIDATED)[0]
    assert np.isfinite(kept["open"]).all() and len(kept) == result.rows_in - 2
