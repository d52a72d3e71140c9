"""Validation checks that need order, a calendar or a whole series (the GX suite sees rows).

* row checks (rows go to quarantine with the reason): an infinite price or volume (``open
  not finite``: it passes every bound the GX suite sets, and an open is a fill price), ``ts``
  not increasing within a symbol in the file's own order, bars outside NYSE sessions, symbols
  not requested;
* file checks (one-line error): frequency other than the configured one, or mixed;
* series checks (one-line error): gaps longer than ``validation.max_gap_bars``;
* flags (reported, rows kept): extreme-return outliers.

Validation runs them on a batch of whole symbols at a time (docs/data.md, validation), so
each works on int64 nanoseconds and contiguous runs of one symbol: no per-row Python.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from tasks.calendar import calendar_index
from tasks.errors import DataError, ValidationFailed

FINITE = ("open", "high", "low", "close", "volume")
"""Columns whose infinite values are quarantined (a NaN is the suite's null)."""
NS_PER = {"1d": 86_400 * 10**9, "1min": 60 * 10**9}
"""Nanoseconds in one bar of each frequency: a bar starts on a whole multiple (UTC)."""


def nanos(ts: pd.Series) -> np.ndarray:
    """A tz-aware ``ts`` column as int64 nanoseconds since the epoch (NaT is int64's minimum)."""
    return ts.array.as_unit("ns").asi8


def check_frequency(frame: pd.DataFrame, freq: str, origin: str) -> None:
    """Timestamps must fit ``freq``: midnight UTC for daily bars, whole minutes for 1min."""
    ts = nanos(frame["ts"])
    ts = ts[ts != pd.NaT.value]
    if freq == "1d":
        off = ts % NS_PER["1d"] != 0
        what = "intraday timestamps in daily bars (mixed frequencies?)"
    else:
        off = ts % NS_PER["1min"] != 0
        if not off.any() and len(ts) > 1 and (ts % NS_PER["1d"] == 0).all():
            raise DataError(f"{origin}: only midnight timestamps in 1min bars (daily data? set data.freq: 1d)")
        what = "timestamps not on whole minutes"
    if off.any():
        raise DataError(f"{origin}: {int(off.sum())} {what}, first at row {int(np.flatnonzero(off)[0])}")


def codes(column: pd.Series) -> np.ndarray:
    """Integer codes of a key column (a categorical's own codes; else in order of appearance)."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        return column.cat.codes.to_numpy(np.int64)
    return pd.factorize(column)[0].astype(np.int64)


def order_failures(frame: pd.DataFrame) -> pd.Series:
    """Rows whose ts is not after every earlier ts of the same symbol, in file order. A row
    right after a null ts is not judged (its symbol's running maximum restarts there)."""
    symbol = codes(frame["symbol"]) + 1  # 0: a null symbol, a group of its own, never judged
    key = codes(frame["_file"]) * (int(symbol.max(initial=0)) + 1) + symbol
    order = np.arange(len(key)) if (np.diff(key) >= 0).all() else np.argsort(key, kind="stable")
    ts, bad = nanos(frame["ts"])[order], np.zeros(len(key), dtype=bool)
    bounds = runs(key[order])
    for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
        own = ts[start:stop]
        prior = np.maximum.accumulate(own)[:-1]
        after_null = own[:-1] == pd.NaT.value
        bad[start + 1 : stop] = (own[1:] <= prior) & (own[1:] != pd.NaT.value) & ~after_null
    out = np.zeros(len(key), dtype=bool)
    out[order] = bad
    out &= symbol > 0
    return pd.Series(out, index=frame.index)


def in_calendar(ts: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """Which int64 times are in the sorted int64 ``expected`` (a binary search each)."""
    pos = np.minimum(np.searchsorted(expected, ts), max(len(expected) - 1, 0))
    return expected[pos] == ts if len(expected) else np.zeros(len(ts), dtype=bool)


def row_checks(frame: pd.DataFrame, freq: str, tickers: list[str]) -> dict[str, pd.Series]:
    """Boolean masks (True = bad) of the row checks GX does not do, keyed by reason."""
    masks = {f"{c} not finite": pd.Series(np.isinf(frame[c].to_numpy(np.float64)), index=frame.index)
             for c in FINITE}
    masks["ts not increasing"] = order_failures(frame)
    ts = frame["ts"].dropna()
    if len(ts):
        expected = calendar_index(freq, ts.min(), ts.max())
        label = "not an NYSE session" if freq == "1d" else "outside NYSE session"
        outside = frame["ts"].notna().to_numpy() & ~in_calendar(nanos(frame["ts"]), expected.asi8)
        masks[label] = pd.Series(outside, index=frame.index)
    if tickers:  # a null symbol is the suite's "null symbol", not an unknown one
        masks["unknown symbol"] = frame["symbol"].notna() & ~frame["symbol"].isin(tickers)
    return masks


@dataclass(frozen=True)
class Gap:
    """A symbol's longest run of missing expected bars."""

    bars: int
    symbol: str
    after: pd.Timestamp
    """The last bar before the gap."""
    before: pd.Timestamp
    """The first bar after it."""
    file: str


def worst_gap(good: pd.DataFrame, freq: str, bounds: np.ndarray | None = None) -> Gap | None:
    """The longest gap of any (file, symbol) of ``good`` (in-session rows; ``bounds``: its
    symbol runs if it is sorted); a tie goes to the one whose first row has the lowest index
    label (the first in row order, for validation's batches). Positions in the calendar of
    expected bars make the night, weekends and holidays no gap, and a half day's early close
    none either."""
    if good.empty:
        return None
    if bounds is None:
        good, bounds = in_order(good)
    expected = calendar_index(freq, good["ts"].min(), good["ts"].max())
    ts, files, labels = nanos(good["ts"]), codes(good["_file"]), good.index.to_numpy()
    worst: tuple[int, object, int, int] | None = None  # (gap, first label, last row before it, first row after)
    for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
        own = files[start:stop]
        for file in np.unique(own) if own.min() != own.max() else own[:1]:
            rows = np.arange(start, stop)[own == file] if own.min() != own.max() else np.arange(start, stop)
            if len(rows) < 2:
                continue
            gaps = np.diff(np.searchsorted(expected.asi8, ts[rows])) - 1
            i = int(np.argmax(gaps))
            first = labels[rows].min()
            if worst is None or gaps[i] > worst[0] or (gaps[i] == worst[0] and first < worst[1]):
                worst = (int(gaps[i]), first, int(rows[i]), int(rows[i + 1]))
    if worst is None:
        return None
    gap, _, last, following = worst
    return Gap(gap, str(good["symbol"].iat[last]), good["ts"].iat[last], good["ts"].iat[following],
               str(good["_file"].iat[last]))


def gap_failure(gap: Gap | None, freq: str, max_gap_bars: int) -> None:
    """Stop if ``gap`` is longer than ``max_gap_bars`` expected bars."""
    if gap is not None and gap.bars > max_gap_bars:
        unit = "sessions" if freq == "1d" else "minutes"
        raise ValidationFailed(f"validation failed: {gap.file}: {gap.symbol} misses {gap.bars} {unit} between "
                               f"{gap.after} and {gap.before} (validation.max_gap_bars = {max_gap_bars})")


def check_gaps(good: pd.DataFrame, freq: str, max_gap_bars: int) -> None:
    """Stop if any symbol misses more than ``max_gap_bars`` consecutive expected bars."""
    gap_failure(worst_gap(good, freq), freq, max_gap_bars)


def runs(symbols: np.ndarray) -> np.ndarray:
    """Start of each run of equal symbols, then the end of the last: ``[0, ..., len]`` (``[0]`` if empty)."""
    starts = np.flatnonzero(symbols[1:] != symbols[:-1]) + 1 if len(symbols) else np.array([], dtype=np.int64)
    return np.concatenate(([0] if len(symbols) else [], starts, [len(symbols)])).astype(np.int64)


def sorted_runs(frame: pd.DataFrame) -> np.ndarray | None:
    """The symbol runs (:func:`runs`) of ``frame`` if it is in (symbol, ts) order, else None."""
    if not frame["symbol"].is_monotonic_increasing:
        return None
    ts = nanos(frame["ts"])
    if (ts == pd.NaT.value).any():
        return None
    bounds = runs(frame["symbol"].to_numpy())
    rising = np.diff(ts) >= 0
    rising[bounds[1:-1] - 1] = True  # a new symbol may start earlier
    return bounds if rising.all() else None


def is_sorted(frame: pd.DataFrame) -> bool:
    """Rows already in (symbol, ts) order, as raw files written by ingest are."""
    return sorted_runs(frame) is not None


def in_order(frame: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """``frame`` in (symbol, ts) order (itself if it already is; ties keep their order) and its symbol runs."""
    bounds = sorted_runs(frame)
    if bounds is not None:
        return frame, bounds
    ordered = frame.sort_values(["symbol", "ts"], kind="stable")
    return ordered, runs(ordered["symbol"].to_numpy())


def outliers(good: pd.DataFrame, sigma: float, bounds: np.ndarray | None = None) -> pd.DataFrame:
    """Bars whose close-to-close log return exceeds ``sigma`` robust standard deviations
    (median absolute deviation × 1.4826) of their symbol: flagged in the report, kept.
    ``bounds``: the symbol runs of ``good`` when the caller has it in (symbol, ts) order."""
    ordered, bounds = (good, bounds) if bounds is not None else in_order(good)
    ret = np.diff(np.log(ordered["close"].to_numpy(np.float64)), prepend=np.nan)
    ret[bounds[:-1]] = np.nan  # a symbol's first bar has no return
    score = np.full(len(ret), np.nan)
    for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
        own = ret[start + 1 : stop]
        known = own[~np.isnan(own)]
        if not len(known):
            continue
        mad = np.median(np.abs(known - np.median(known)))
        if mad != 0:  # no spread: no robust z exists, nothing is flagged
            score[start + 1 : stop] = np.abs(own) / (1.4826 * mad)
    hit = score > sigma
    return ordered.loc[hit, ["_file", "symbol", "ts", "close"]].assign(log_return=ret[hit], robust_z=score[hit])
