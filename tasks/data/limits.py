"""Hard limits beside the soft flags (docs/data.md, validation): absurd moves are quarantined, splits reported.

* **Hard limit** (:func:`limit_failures`): a bar whose close-to-close |log return| exceeds
  ``validation.max_abs_log_return`` (default 3, a ×20 move that no listed stock makes in one
  bar) is quarantined with a reason naming the symbol, the ts and the value. The return is
  taken against the symbol's last bar that was **kept**, so one absurd print (a close of 1e12
  between two closes of 50) costs one row, not two, and a level that stays absurd (a unit
  change mid-file) quarantines every bar at that level. An absurd *first* bar (it jumps to
  the second, and the second and third agree) is the one quarantined, not the rest. The same
  limit holds the bar's **open** to the same kept close (the gap, open / previous close):
  orders fill at the next open, so an absurd open is as harmful as an absurd close.
* **Soft flag** (``checks.outliers``): beyond ``validation.outlier_sigma`` robust sds, reported
  and kept. Real markets do make such moves.
* **Suspected split** (:func:`suspected_splits`): a close-to-open ratio within
  :data:`SPLIT_TOLERANCE` of a split factor (1/2, 1/3, 2, 3, ... :data:`SPLIT_FACTORS`) on a bar
  that then stays put (close within :data:`STILL` of its open) looks like a stock split in
  unadjusted prices. It is reported, with the advice to use split-adjusted data, and kept.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pandas as pd

from tasks.data.checks import in_order

SPLIT_FACTORS = tuple(sorted({Fraction(k) for k in (2, 3, 4, 5, 10, 20)}
                             | {Fraction(1, k) for k in (2, 3, 4, 5, 10, 20)} | {Fraction(3, 2), Fraction(2, 3)}))
"""Price ratios (new / old) of common forward splits (1/2 is a 2-for-1) and reverse splits (10 is 1-for-10)."""
SPLIT_TOLERANCE = 0.03
"""How close, in log terms (about 3%), the close-to-open ratio must be to a split factor."""
STILL = 0.1
"""|log(close / open)| of the split bar below which the price "does not move after" the gap."""
LIMIT_REASON = "log return beyond validation.max_abs_log_return"
"""The check's name in the report's counts; each row's reason adds symbol, ts and value."""


def limit_reason(symbol: str, ts: pd.Timestamp, value: float, limit: float, what: str = "log return") -> str:
    return f"{LIMIT_REASON}: {symbol} {ts} {what} {value:+.2f} beyond ±{limit:g}"  # check name, then detail


GAP = "open gap (log open / previous close)"
"""How a reason names the move of an open from the last kept close."""


def limit_failures(good: pd.DataFrame, limit: float, bounds: np.ndarray | None = None) -> pd.Series:
    """Reasons of the rows of ``good`` (index labels) whose close, or whose open, lies more than
    ``limit`` in |log| from the symbol's last kept close. The symbol's first bar is the
    reference it starts from (its open has no previous close), unless that bar is the absurd
    one: it jumps to the second bar, and the second and third agree. ``bounds``: the symbol
    runs of ``good`` when the caller has it in (symbol, ts) order."""
    ordered, bounds = (good, bounds) if bounds is not None else in_order(good)
    logs = np.log(ordered["close"].to_numpy(np.float64))
    opens = np.log(ordered["open"].to_numpy(np.float64))
    jumps = (np.abs(np.diff(logs)) > limit) | (np.abs(opens[1:] - logs[:-1]) > limit)
    jumps[bounds[1:-1] - 1] = False  # two symbols, not a move
    reasons: dict[object, str] = {}
    if not jumps.any():  # the usual case: one vectorised pass
        return pd.Series(reasons, dtype=object)
    labels, stamps, symbols = ordered.index.to_numpy(), ordered["ts"], ordered["symbol"]
    for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
        if not jumps[start : stop - 1].any():
            continue
        rows, symbol = np.arange(start, stop), str(symbols.iat[start])
        if len(rows) >= 3 and abs(logs[rows[1]] - logs[rows[0]]) > limit >= abs(logs[rows[2]] - logs[rows[1]]):
            first = rows[0]  # the first bar is the absurd one: the next two agree with each other
            reasons[labels[first]] = limit_reason(symbol, stamps.iat[first], logs[first] - logs[rows[1]], limit)
            rows = rows[1:]
        kept = logs[rows[0]]
        for i in rows[1:]:
            move, gap = logs[i] - kept, opens[i] - kept
            if abs(move) > limit:
                reasons[labels[i]] = limit_reason(symbol, stamps.iat[i], move, limit)
            elif abs(gap) > limit:
                reasons[labels[i]] = limit_reason(symbol, stamps.iat[i], gap, limit, GAP)
            else:
                kept = logs[i]
    return pd.Series(reasons, dtype=object)


def nearest_factor(ratio: float) -> Fraction | None:
    """The split factor within :data:`SPLIT_TOLERANCE` of ``ratio`` (log distance), if any."""
    if not ratio > 0:
        return None
    best = min(SPLIT_FACTORS, key=lambda f: abs(math.log(ratio) - math.log(f)))
    return best if abs(math.log(ratio) - math.log(best)) <= SPLIT_TOLERANCE else None


def describe_factor(factor: Fraction) -> str:
    """``1/2`` → ``2-for-1 split``; ``10`` → ``1-for-10 reverse split``."""
    if factor < 1:
        return f"{factor.denominator}-for-{factor.numerator} split"
    return f"{factor.denominator}-for-{factor.numerator} reverse split"


def suspected_splits(good: pd.DataFrame, bounds: np.ndarray | None = None) -> pd.DataFrame:
    """Bars that look like an unadjusted split: ``symbol``, ``ts``, ``ratio`` (open / previous
    close), ``split`` (its description) and ``_file``; empty when there are none.
    ``bounds``: the symbol runs of ``good`` when the caller has it in (symbol, ts) order."""
    ordered, bounds = (good, bounds) if bounds is not None else in_order(good)
    close, open_ = ordered["close"].to_numpy(np.float64), ordered["open"].to_numpy(np.float64)
    prev_close = np.roll(close, 1)
    prev_close[bounds[:-1]] = np.nan  # a symbol's first bar has no previous close
    ratio = open_ / prev_close
    gap = np.log(ratio)
    still = np.abs(np.log(close / open_)) < STILL
    candidate = np.isfinite(gap) & still & (np.abs(gap) >= math.log(1.5) - SPLIT_TOLERANCE)
    hits = ordered.loc[candidate, ["_file", "symbol", "ts"]].assign(ratio=ratio[candidate])
    factors = [nearest_factor(float(r)) for r in hits["ratio"]]
    hits = hits.assign(split=[describe_factor(f) if f is not None else "" for f in factors])
    return hits[hits["split"] != ""].reset_index(drop=True)
