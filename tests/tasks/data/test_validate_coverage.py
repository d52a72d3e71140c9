"""The validation report's Coverage section (docs/data.md, ragged universes): on a hand-made ragged universe, every
symbol-bar the tradable mask will hide is counted, by cause, with hand-computed numbers."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from flows.stage_table import STAGES
from standins.tiny import tiny_params
from tasks.calendar import nyse_sessions
from tasks.data.bars import panel
from tasks.data.coverage import bar_coverage, coverage_lines, real_bars
from tasks.data.ingest import ingest
from tasks.data.validate import validate

SESSIONS = nyse_sessions(pd.Timestamp("2021-01-04").date(), pd.Timestamp("2021-03-31").date())[:40]
MIN_HISTORY, WARMUP = 6, 10
"""Each symbol's own warm-up masks min(real bars, 5) bars (ret_5 needs 6); features drops the
panel's first 10."""


def ragged() -> pd.DataFrame:
    """40 sessions: AAA on all of them; LATE lists at session 10; GAP halts for sessions 20-22;
    STOP stops after session 24; ONE has a single row, at session 15; EARLY stops after session 7,
    so its 3 tradable bars all fall in the panel's 10-bar warm-up."""
    i = np.arange(len(SESSIONS))
    keep = {"AAA": i >= 0, "EARLY": i <= 7, "GAP": (i < 20) | (i > 22), "LATE": i >= 10, "ONE": i == 15,
            "STOP": i <= 24}
    frames = []
    for k, (symbol, mask) in enumerate(keep.items()):
        close = (50.0 + k) * (1 + 0.001 * np.sin(i))[mask]
        frames.append(pd.DataFrame({"ts": SESSIONS[mask].strftime("%Y-%m-%d"), "symbol": symbol, "open": close,
                                    "high": close * 1.01, "low": close * 0.99, "close": close, "volume": 1e5}))
    return pd.concat(frames, ignore_index=True)


# Hand-computed, per symbol: (first, last, real, listed late, gaps, stopped early, warm-up, tradable).
# Masked = 40 - tradable: AAA 5, EARLY 37, GAP 8, LATE 15, ONE 40, STOP 20 = 125 of 240 symbol-bars.
EXPECTED = {
    "EARLY": ("2021-01-04", "2021-01-13", 8, 0, 0, 32, 5, 3),
    "GAP": ("2021-01-04", "2021-03-02", 37, 0, 3, 0, 5, 32),
    "LATE": ("2021-01-19", "2021-03-02", 30, 10, 0, 0, 5, 25),
    "ONE": ("2021-01-26", "2021-01-26", 1, 15, 0, 24, 1, 0),
    "STOP": ("2021-01-04", "2021-02-08", 25, 0, 0, 15, 5, 20),
}


OVERRIDES = ("data.source=file", "data.tickers=[AAA,EARLY,GAP,LATE,ONE,STOP]", "data.start=2021-01-01",
             "data.end=2021-03-31", "features.indicators=[ret_5]", f"features.min_history={MIN_HISTORY}",
             f"features.warmup={WARMUP}")


def run(tmp_path, *overrides):
    path = tmp_path / "ragged.csv"
    ragged().to_csv(path, index=False)
    params = tiny_params(tmp_path, *OVERRIDES, f"data.path={path}", *overrides)
    ingest(params)
    return params, validate(params)


def test_a_ragged_universe_validates_and_the_report_counts_what_is_masked_by_cause(tmp_path):
    assert (SESSIONS[0], SESSIONS[7], SESSIONS[10], SESSIONS[15], SESSIONS[24], SESSIONS[39]) == tuple(
        pd.Timestamp(d, tz="UTC") for d in ("2021-01-04", "2021-01-13", "2021-01-19", "2021-01-26", "2021-02-08",
                                            "2021-03-02"))
    _, result = run(tmp_path)  # a ragged panel is not a validation failure
    assert (result.rows_in, result.rows_out, result.quarantined) == (141, 141, 0)  # 40 + 8 + 37 + 30 + 1 + 25
    assert (result.panel_bars, result.panel_symbols) == (40, 6)
    assert (result.masked_cells, result.warmup_cells, result.masked_beyond_warmup) == (125, 26, 99)
    assert result.never_tradable == ("EARLY", "ONE")
    assert STAGES["validate"].summary(result).endswith(
        "; [yellow]99 symbol-bars masked beyond warm-up, 2 symbol(s) never tradable (see the report's Coverage)[/]")

    report = result.report.read_text()
    section = report[report.index("## Coverage"):]
    assert "The panel of the kept bars: 40 bars x 6 symbols. A symbol is tradable where it has a real bar and " \
           "at least 6 real bars of its own (features.min_history)." in section
    assert "the features stage then drops its first 10 bars (features.warmup)" in section
    assert ("- symbols dropped by features (no tradable bar after the 10-bar warm-up: fewer than 6 real bars, "
            "or all of them before it): 2 (EARLY, ONE)\n") in section
    # listed late 10 + 15, gaps 3, stopped early 32 + 15 + 24, warm-up 5 x 5 + 1: 25 + 3 + 71 + 26 = 125
    assert "- masked symbol-bars: 125 of 240 (listed late 25, gaps 3, stopped early 71, warm-up 26)\n" in section
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| symbol")]
    assert rows == [f"| {s} | {' | '.join(map(str, v))} |" for s, v in EXPECTED.items()]  # AAA: only warm-up
    assert section.endswith(rows[-1] + "\n")
    assert report.startswith("# Validation report\n\n- rows in: 141\n- rows quarantined: 0\n")  # kept as it was


def test_the_report_drops_the_symbols_the_features_stage_drops(tmp_path):
    from tasks.data import feature_set, features

    params, result = run(tmp_path, "features.train_end=2021-02-10", "features.val_end=2021-02-22")
    features.features(params)
    summary = json.loads((params.dirs.features / feature_set.COVERAGE).read_text())
    assert summary["dropped_symbols"] == list(result.never_tradable) == ["EARLY", "ONE"]
    # features counts after its 10-bar warm-up: the masked cells of the kept symbols in bars 10..39
    # AAA 0, GAP 3, LATE 5 (its own warm-up, bars 10-14), STOP 15 = 23
    assert (summary["bars"], summary["symbols"], summary["masked_cells"]) == (30, 4, 23)


def test_real_bars_is_the_panels_real_mask():
    bars = ragged().assign(ts=lambda f: pd.to_datetime(f["ts"], utc=True)).sample(frac=1.0, random_state=3)
    real, stamps, symbols = real_bars(bars)
    wide = panel(bars)["real"]
    assert symbols == list(wide.columns) and stamps.equals(pd.DatetimeIndex(wide.index))
    np.testing.assert_array_equal(real, wide.to_numpy(bool))


def test_a_symbol_is_dropped_only_when_its_last_tradable_bar_is_inside_the_panels_warm_up():
    i = np.arange(len(SESSIONS))
    frames = [pd.DataFrame({"ts": SESSIONS[mask], "symbol": symbol})
              for symbol, mask in {"AAA": i >= 0, "TO9": (i >= 4) & (i <= 9), "TO10": (i >= 5) & (i <= 10)}.items()]
    cover = bar_coverage(pd.concat(frames, ignore_index=True), MIN_HISTORY, WARMUP)
    # 6 real bars each: TO9 is tradable at bar 9 only (inside the 10-bar warm-up), TO10 at bar 10 only
    assert [c.tradable for c in cover.per_symbol] == [35, 1, 1] and cover.dropped == ("TO9",)


def test_a_panel_too_short_for_the_features_warm_up_drops_nothing_and_says_features_will_refuse_it():
    bars = ragged().assign(ts=lambda f: pd.to_datetime(f["ts"], utc=True))
    assert bar_coverage(bars, MIN_HISTORY, 37).dropped == ("EARLY", "ONE", "STOP")  # 40 bars: the longest warm-up
    cover = bar_coverage(bars, MIN_HISTORY, 38)
    assert cover.too_short and cover.dropped == () and cover.masked == 125
    assert "- the features stage will refuse this panel: 40 bars is too few for its 38-bar warm-up " \
           "(features.warmup)" in coverage_lines(cover)


def test_no_bars_kept_is_no_coverage():
    cover = bar_coverage(ragged().iloc[:0], MIN_HISTORY)
    assert (cover.bars, cover.masked, cover.dropped) == (0, 0, ())
