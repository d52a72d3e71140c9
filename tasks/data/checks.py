"""Validation checks that need order, a calendar or a whole series (the GX suite sees rows).

* row checks (rows go to quarantine with the reason): ``ts`` not increasing within a
  symbol in the file's own order, bars outside NYSE sessions, symbols not requested;
* file checks (one-line error): frequency other than the configured one, or mixed;
* series checks (one-line error): gaps longer than ``validation.max_gap_bars``;
* flags (reported, rows kept): extreme-return outliers.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tasks.errors import DataError, ValidationFailed


def calendar_index(freq: str, start: pd.Timestamp, end: pd.Timestamp) -> pd.DatetimeIndex:
    """Expected bar starts (UTC) between ``start`` and ``end``: NYSE sessions at 00:00 UTC
    for daily bars, NYSE trading minutes (half days included) for 1-minute bars."""
    import exchange_calendars as xcals

    first, last = start.tz_convert(None).normalize(), end.tz_convert(None).normalize()
    cal = xcals.get_calendar("XNYS", start=min(first, pd.Timestamp("2006-01-03")), end=max(last, first))
    sessions = cal.sessions[(cal.sessions >= first) & (cal.sessions <= last)]
    if freq == "1d":
        return pd.DatetimeIndex(sessions).tz_localize("UTC")
    if sessions.empty:
        return pd.DatetimeIndex([], tz="UTC")
    first_minute, last_minute = cal.session_first_minute(sessions[0]), cal.session_last_minute(sessions[-1])
    return pd.DatetimeIndex(cal.minutes_in_range(first_minute, last_minute))


def check_frequency(frame: pd.DataFrame, freq: str, origin: str) -> None:
    """Timestamps must fit ``freq``: midnight UTC for daily bars, whole minutes for 1min."""
    ts = frame["ts"]
    if freq == "1d":
        off = ts != ts.dt.normalize()
        what = "intraday timestamps in daily bars (mixed frequencies?)"
    else:
        off = ts != ts.dt.floor("min")
        if not off.any() and len(ts) > 1 and (ts == ts.dt.normalize()).all():
            raise DataError(f"{origin}: only midnight timestamps in 1min bars (daily data? set data.freq: 1d)")
        what = "timestamps not on whole minutes"
    if off.any():
        raise DataError(f"{origin}: {int(off.sum())} {what}, first at row {int(np.flatnonzero(off)[0])}")


def order_failures(frame: pd.DataFrame) -> pd.Series:
    """Rows whose ts is not after every earlier ts of the same symbol, in file order."""
    keys = [frame["_file"], frame["symbol"]]
    prior = frame["ts"].groupby(keys, sort=False, observed=True).cummax().groupby(keys, sort=False, observed=True).shift(1)
    return frame["ts"] <= prior


def row_checks(frame: pd.DataFrame, freq: str, tickers: list[str]) -> dict[str, pd.Series]:
    """Boolean masks (True = bad) of the row checks GX does not do, keyed by reason."""
    masks = {"ts not increasing": order_failures(frame)}
    ts = frame["ts"].dropna()
    if len(ts):
        expected = calendar_index(freq, ts.min(), ts.max())
        label = "not an NYSE session" if freq == "1d" else "outside NYSE session"
        masks[label] = frame["ts"].notna() & ~frame["ts"].isin(expected)
    if tickers:
        masks["unknown symbol"] = ~frame["symbol"].isin(tickers)
    return masks


def check_gaps(good: pd.DataFrame, freq: str, max_gap_bars: int) -> None:
    """Stop if any symbol misses more than ``max_gap_bars`` consecutive expected bars."""
    if good.empty:
        return
    expected = calendar_index(freq, good["ts"].min(), good["ts"].max())
    worst: tuple[int, str, pd.Timestamp, pd.Timestamp, str] | None = None
    for (file, symbol), group in good.groupby(["_file", "symbol"], sort=False, observed=True):
        pos = np.searchsorted(expected.asi8, np.sort(group["ts"].array.asi8))
        if len(pos) < 2:
            continue
        gaps = np.diff(pos) - 1
        i = int(np.argmax(gaps))
        if gaps[i] > max_gap_bars and (worst is None or gaps[i] > worst[0]):
            worst = (int(gaps[i]), str(symbol), expected[pos[i]], expected[min(pos[i + 1], len(expected) - 1)], str(file))
    if worst:
        gap, symbol, after, before, file = worst
        unit = "sessions" if freq == "1d" else "minutes"
        raise ValidationFailed(f"validation failed: {file}: {symbol} misses {gap} {unit} between {after} and {before} "
                               f"(validation.max_gap_bars = {max_gap_bars})")


def is_sorted(frame: pd.DataFrame) -> bool:
    """Rows already in (symbol, ts) order, as raw files written by ingest are."""
    if not frame["symbol"].is_monotonic_increasing:
        return False
    return bool(frame.groupby("symbol", sort=False)["ts"].is_monotonic_increasing.all())


def outliers(good: pd.DataFrame, sigma: float) -> pd.DataFrame:
    """Bars whose close-to-close log return exceeds ``sigma`` robust standard deviations
    (median absolute deviation × 1.4826) of their symbol: flagged in the report, kept."""
    ordered = good if is_sorted(good) else good.sort_values(["symbol", "ts"])
    ret = np.log(ordered["close"]).groupby(ordered["symbol"]).diff()
    mad = (ret - ret.groupby(ordered["symbol"]).transform("median")).abs().groupby(ordered["symbol"]).transform("median")
    score = ret.abs() / (1.4826 * mad).replace(0.0, np.nan)
    hits = ordered.loc[score > sigma, ["_file", "symbol", "ts", "close"]]
    return hits.assign(log_return=ret[hits.index], robust_z=score[hits.index])
