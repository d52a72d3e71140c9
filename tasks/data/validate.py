"""Stage 2, validate: a Great Expectations 1.x suite plus order, calendar and gap checks.

Rows that fail a row-level check go to ``data/quarantine/<file>.parquet`` with a
``reason`` column; the rest go to ``data/validated/bars.parquet``. Rows in = rows out +
rows quarantined, and ``data/raw/`` is never modified. If more than
``validation.max_bad_fraction`` of the rows fail, the stage stops with one line naming
each offending file and its count. A close-to-close move beyond
``validation.max_abs_log_return`` is quarantined too (``tasks/data/limits.py``).
``report.md`` (kept with the quarantine and logged to MLflow) lists the counts per check,
the hard-limit rows, the flagged return outliers, any suspected split, and the coverage of
the kept bars (docs/data.md, what is counted): the symbols that would never be tradable and the symbol-bars the
tradable mask will hide, by cause. Nothing the data layer drops or masks is silent.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from prefect import task

from tasks.caching import data_cache_key
from tasks.config import Params
from tasks.data.bars import COLUMNS, PRICE_COLUMNS, VALIDATED, read_parquet, to_contract, write_parquet
from tasks.data.checks import check_frequency, check_gaps, is_sorted, outliers, row_checks
from tasks.data.limits import LIMIT_REASON, limit_failures, suspected_splits
from tasks.data.tradable import SymbolCoverage, coverage, tradable_mask
from tasks.errors import DataError, MissingInput, ValidationFailed
from tasks.storage import atomic_dir

log = logging.getLogger("podracer.validate")
REPORT = "report.md"


@dataclass(frozen=True)
class ValidateResult:
    rows_in: int
    rows_out: int
    quarantined: int
    path: Path
    report: Path
    splits: int = 0
    """Suspected splits reported (rows kept)."""
    panel_bars: int = 0
    """Timestamps in the panel of the kept bars (every timestamp any symbol has)."""
    panel_symbols: int = 0
    masked_cells: int = 0
    """Symbol-bars of that panel the tradable mask hides: before listing, gaps, after the end
    and each symbol's own warm-up (``features.min_history``)."""
    warmup_cells: int = 0
    """Of ``masked_cells``, those in a symbol's own warm-up."""
    never_tradable: tuple[str, ...] = ()
    """Symbols with no tradable bar after the panel's ``features.warmup`` bars (fewer than
    ``features.min_history`` real bars, or all of them before): the features stage drops them."""

    @property
    def masked_beyond_warmup(self) -> int:
        """Symbol-bars masked because a symbol listed late, has gaps or stopped early."""
        return self.masked_cells - self.warmup_cells


def _suite() -> list[tuple[str, Any]]:
    """(reason, expectation) pairs of the OHLCV suite; GX is imported lazily (~4 s)."""
    import great_expectations as gx

    e = gx.expectations
    pairs: list[tuple[str, Any]] = [
        (f"null {c}", e.ExpectColumnValuesToNotBeNull(column=c))
        for c in ("symbol", "ts", *PRICE_COLUMNS, "volume")
    ]
    pairs += [
        (f"{c} <= 0", e.ExpectColumnValuesToBeBetween(column=c, min_value=0, strict_min=True))
        for c in PRICE_COLUMNS
    ]
    pairs += [
        ("high < open", e.ExpectColumnPairValuesAToBeGreaterThanB(column_A="high", column_B="open", or_equal=True)),
        ("high < close", e.ExpectColumnPairValuesAToBeGreaterThanB(column_A="high", column_B="close", or_equal=True)),
        ("high < low", e.ExpectColumnPairValuesAToBeGreaterThanB(column_A="high", column_B="low", or_equal=True)),
        ("low > open", e.ExpectColumnPairValuesAToBeGreaterThanB(column_A="open", column_B="low", or_equal=True)),
        ("low > close", e.ExpectColumnPairValuesAToBeGreaterThanB(column_A="close", column_B="low", or_equal=True)),
        ("volume < 0", e.ExpectColumnValuesToBeBetween(column="volume", min_value=0)),
        ("duplicate (symbol, ts)", e.ExpectCompoundColumnsToBeUnique(column_list=["symbol", "ts"])),
    ]
    return pairs


GX_CHUNK_ROWS = 1_000_000
"""GX validates whole symbols in chunks of about this many rows, to bound its memory."""


def symbol_chunks(symbols: pd.Series, max_rows: int = GX_CHUNK_ROWS) -> Iterator[np.ndarray]:
    """Row positions in chunks of whole symbols (so duplicates stay inside one chunk)."""
    chunk: list[np.ndarray] = []
    size = 0
    for positions in symbols.groupby(symbols, sort=True).indices.values():
        if chunk and size + len(positions) > max_rows:
            yield np.concatenate(chunk)
            chunk, size = [], 0
        chunk.append(positions)
        size += len(positions)
    if chunk:
        yield np.concatenate(chunk)


def row_failures(bars: pd.DataFrame) -> pd.Series:
    """Reasons each row fails the suite, ``"; "``-joined, indexed by row position (failing rows only)."""
    import great_expectations as gx

    # GX sets INFO on this logger and announces a temporary docs folder on every context.
    logging.getLogger("great_expectations.data_context.types.base").setLevel(logging.WARNING)
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = {"globally": False}  # type: ignore[assignment]
    asset = context.data_sources.add_pandas("bars").add_dataframe_asset(name="bars")
    batch_def = asset.add_batch_definition_whole_dataframe("all")
    suite = context.suites.add(gx.ExpectationSuite(name="ohlcv"))
    # GX does not return results in suite order: key each reason by its expectation's id.
    reason_of = {suite.add_expectation(expectation).id: reason for reason, expectation in _suite()}
    reasons: dict[int, list[str]] = {}
    for positions in symbol_chunks(bars["symbol"].fillna("")):
        frame = bars.iloc[positions][list(COLUMNS)].reset_index(drop=True)
        batch = batch_def.get_batch(batch_parameters={"dataframe": frame})
        result = batch.validate(suite, result_format={"result_format": "COMPLETE"})
        for outcome in result.results:
            reason = reason_of[outcome.expectation_config.id]
            if outcome.exception_info.get("raised_exception"):
                raise DataError(f"validation: expectation '{reason}' could not run")
            for idx in outcome.result.get("unexpected_index_list") or []:
                reasons.setdefault(int(positions[int(idx)]), []).append(reason)
    return pd.Series({i: "; ".join(r) for i, r in sorted(reasons.items())}, dtype=object)


def _load_raw(raw: Path, freq: str) -> pd.DataFrame:
    """All raw files in file order, shape-checked; ``_file`` remembers where a row came from."""
    files = sorted(raw.glob("*.parquet"))
    if not files:
        raise MissingInput(f"{raw}: no Parquet files (run `podracer ingest` first)")
    frames = []
    for path in files:
        frame, recorded = read_parquet(path)
        if recorded not in (None, freq):
            raise DataError(f"{path}: holds {recorded} bars but data.freq is {freq}")
        if frame.empty:
            raise DataError(f"{path}: no rows")
        frame = to_contract(frame, str(path), sort=False)
        check_frequency(frame.dropna(subset=["ts"]), freq, str(path))
        frame["_file"] = pd.Categorical([str(path)] * len(frame), categories=[str(f) for f in files])
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def _checks(joined: str) -> list[str]:
    """The checks a row failed, without the per-row details after ``": "`` (the hard limit's)."""
    return [reason.split(": ", 1)[0] for reason in joined.split("; ")]


def _reasons(group: pd.DataFrame) -> list[str]:
    return sorted({r for joined in group["reason"] for r in _checks(joined)})


SPLIT_ADVICE = ("These bars gap by a split ratio and then stay put: unadjusted prices around a stock split? "
                "Use split-adjusted data (yfinance auto_adjust=True, CRSP prices divided by cfacpr).")


@dataclass(frozen=True)
class PanelCoverage:
    """The kept bars' panel and what the tradable mask hides in it (``tasks/data/tradable.py``)."""

    bars: int
    min_history: int
    """``features.min_history``: real bars of its own a symbol needs before it is tradable."""
    warmup: int
    """``features.warmup``: panel bars the features stage drops at the start."""
    per_symbol: list[SymbolCoverage]
    dropped: tuple[str, ...] = ()
    """Symbols with no tradable bar after the panel's warm-up: the features stage drops them."""

    @property
    def too_short(self) -> bool:
        """The features stage refuses a panel this short for its warm-up (and drops nothing)."""
        return self.bars <= self.warmup + 2

    @property
    def masked(self) -> int:
        """Symbol-bars of the whole panel that are not tradable, warm-up included."""
        return sum(self.bars - c.tradable for c in self.per_symbol)

    @property
    def warmup_cells(self) -> int:
        """Of ``masked``, the real bars in each symbol's own warm-up."""
        return sum(c.warmup for c in self.per_symbol)


def real_bars(bars: pd.DataFrame) -> tuple[np.ndarray, pd.DatetimeIndex, list[str]]:
    """``[T, n]`` bool where a symbol has a bar, over every timestamp any symbol has (sorted),
    and the symbols (sorted): ``panel(bars)["real"]`` without pivoting five price fields."""
    t_code, stamps = pd.factorize(bars["ts"], sort=True)
    s_code, symbols = pd.factorize(bars["symbol"], sort=True)
    real = np.zeros((len(stamps), len(symbols)), dtype=bool)
    real[t_code, s_code] = True
    return real, pd.DatetimeIndex(stamps), [str(s) for s in symbols]


def bar_coverage(bars: pd.DataFrame, min_history: int, warmup: int = 0) -> PanelCoverage:
    """The coverage of the whole panel of ``bars`` (valid rows, unique on (symbol, ts)), and the
    symbols the features stage will drop after cutting the panel's first ``warmup`` bars."""
    if bars.empty:
        return PanelCoverage(0, min_history, warmup, [])
    real, stamps, symbols = real_bars(bars)
    mask = tradable_mask(real, min_history)
    days = np.datetime_as_string(stamps.tz_convert("UTC").tz_localize(None).to_numpy("datetime64[ns]"), unit="D")
    cover = PanelCoverage(len(stamps), min_history, warmup, coverage(real, mask, symbols, [str(d) for d in days]))
    if cover.too_short:
        return cover
    kept = mask[warmup:].any(axis=0)
    return replace(cover, dropped=tuple(s for s, keep in zip(symbols, kept, strict=True) if not keep))


def _coverage_lines(cover: PanelCoverage) -> list[str]:
    n, k, per = len(cover.per_symbol), cover.min_history, cover.per_symbol
    lines = ["## Coverage", "",
             (f"The panel of the kept bars: {cover.bars} bars x {n} symbols. A symbol is tradable where it has "
              f"a real bar and at least {k} real bars of its own (features.min_history)."),
             (f"Counted over the whole panel: the features stage then drops its first {cover.warmup} bars "
              "(features.warmup), so its coverage.json counts fewer masked bars."), ""]
    if not n:
        return [*lines, "No bars kept: nothing to cover."]
    if cover.too_short:
        lines.append(f"- the features stage will refuse this panel: {cover.bars} bars is too few for its "
                     f"{cover.warmup}-bar warm-up (features.warmup)")
    else:
        lines.append(f"- symbols dropped by features (no tradable bar after the {cover.warmup}-bar warm-up: fewer "
                     f"than {k} real bars, or all of them before it): {len(cover.dropped)}"
                     + (f" ({', '.join(cover.dropped)})" if cover.dropped else ""))
    lines += [(f"- masked symbol-bars: {cover.masked} of {cover.bars * n} "
               f"(listed late {sum(c.before_listing for c in per)}, gaps {sum(c.gaps for c in per)}, "
               f"stopped early {sum(c.after_end for c in per)}, warm-up {cover.warmup_cells})"), ""]
    ragged = [c for c in per if c.before_listing or c.gaps or c.after_end or c.symbol in cover.dropped]
    if not ragged:
        return [*lines, (f"Every symbol has a real bar at every panel bar: nothing is masked beyond each "
                         f"symbol's own warm-up ({min(k - 1, cover.bars)} bars).")]
    lines += ["| symbol | first | last | real bars | listed late | gaps | stopped early | warm-up | tradable |",
              "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {c.symbol} | {c.first} | {c.last} | {c.real_bars} | {c.before_listing} | {c.gaps} | "
              f"{c.after_end} | {c.warmup} | {c.tradable} |" for c in ragged]
    return lines


def _write_report(path: Path, rows_in: int, bad: pd.DataFrame, flagged: pd.DataFrame, splits: pd.DataFrame,
                  cover: PanelCoverage | None = None) -> None:
    lines = [
        "# Validation report",
        "",
        f"- rows in: {rows_in}",
        f"- rows quarantined: {len(bad)}",
        f"- rows out: {rows_in - len(bad)}",
        f"- return outliers flagged (kept): {len(flagged)}",
        f"- suspected splits (kept): {len(splits)}",
        "",
    ]
    if len(bad):
        counts = pd.Series([r for joined in bad["reason"] for r in _checks(joined)]).value_counts()
        lines += ["| check | rows |", "|---|---|", *(f"| {r} | {n} |" for r, n in counts.items()), ""]
        lines += ["| file | rows | reasons |", "|---|---|---|"]
        for name, group in bad.groupby("_file", observed=True):
            lines.append(f"| {name} | {len(group)} | {', '.join(_reasons(group))} |")
        lines.append("")
        over = [r for joined in bad["reason"] for r in joined.split("; ") if r.startswith(LIMIT_REASON + ": ")]
        if over:
            lines += ["Quarantined by the hard limit (first 20):", "", *(f"- {r}" for r in over[:20]), ""]
    if len(flagged):
        lines += ["| symbol | ts | log return | robust z |", "|---|---|---|---|"]
        for row in flagged.sort_values("robust_z", ascending=False).head(20).itertuples():
            lines.append(f"| {row.symbol} | {row.ts} | {row.log_return:.4f} | {row.robust_z:.1f} |")
    if len(splits):
        lines += ["", "## Suspected splits", "", SPLIT_ADVICE, "", "| symbol | ts | open / previous close | looks like |",
                  "|---|---|---|---|"]
        lines += [f"| {r.symbol} | {r.ts} | {r.ratio:.4f} | {r.split} |" for r in splits.head(20).itertuples()]
    if cover is not None:
        lines += ["", *_coverage_lines(cover)] if lines[-1] else _coverage_lines(cover)
    path.write_text("\n".join(lines) + "\n")


def _all_reasons(bars: pd.DataFrame, params: Params) -> pd.Series:
    """GX row failures merged with the calendar/order/symbol checks, one string per bad row."""
    gx_reasons = row_failures(bars)
    lists: dict[int, list[str]] = {int(i): r.split("; ") for i, r in gx_reasons.items()}
    for reason, mask in row_checks(bars, params.data.freq, params.data.tickers).items():
        for i in np.flatnonzero(mask.to_numpy()):
            lists.setdefault(int(i), []).append(reason)
    return pd.Series({i: "; ".join(r) for i, r in sorted(lists.items())}, dtype=object)


def validate(params: Params) -> ValidateResult:
    """Validate ``data/raw/``; write ``data/validated/`` and ``data/quarantine/``."""
    dirs, cfg = params.dirs, params.validation
    bars = _load_raw(dirs.raw, params.data.freq)
    reasons = _all_reasons(bars, params)
    over = limit_failures(bars.drop(index=reasons.index), cfg.max_abs_log_return)
    if len(over):
        reasons = pd.concat([reasons, over]).sort_index()
    bad = bars.loc[reasons.index].assign(reason=reasons.values)
    good = bars.drop(index=reasons.index) if len(reasons) else bars
    flagged = outliers(good, cfg.outlier_sigma)
    splits = suspected_splits(good)
    cover = bar_coverage(good, params.features.min_history, params.features.warmup)
    if len(splits):
        first = splits.iloc[0]
        log.warning("%d suspected split(s), e.g. %s at %s (%s): use split-adjusted data; see the validation report",
                    len(splits), first["symbol"], first["ts"], first["split"])

    with atomic_dir(dirs.quarantine) as staging:
        for name, group in bad.groupby("_file", observed=True):
            target = staging / Path(str(name)).name
            write_parquet(group.drop(columns="_file").reset_index(drop=True), target, params.data.freq)
        _write_report(staging / REPORT, len(bars), bad, flagged, splits, cover)
    report = dirs.quarantine / REPORT

    out = dirs.validated / VALIDATED
    out.unlink(missing_ok=True)  # downstream must never read a stale validated set
    fraction = len(bad) / max(len(bars), 1)
    if fraction > cfg.max_bad_fraction:
        per_file = "; ".join(
            f"{name}: {len(g)} ({', '.join(_reasons(g))})"
            for name, g in bad.groupby("_file", observed=True)
        )
        raise ValidationFailed(
            f"validation failed: {len(bad)} of {len(bars)} rows bad in {per_file}; "
            f"quarantined in {dirs.quarantine}/"
        )
    check_gaps(good, params.data.freq, cfg.max_gap_bars)
    good = good.drop(columns="_file")
    if not is_sorted(good):
        good = good.sort_values(["symbol", "ts"], kind="stable")
    write_parquet(good.reset_index(drop=True), out, params.data.freq)
    counts = len(good), len(bad), len(flagged)
    log.info("validated %d rows, quarantined %d, flagged %d outliers", *counts)  # pragma: no mutate
    if cover.dropped:
        log.warning("%d symbol(s) never tradable (fewer than %d real bars after the %d-bar warm-up), features "
                    "will drop them: %s", len(cover.dropped), cover.min_history, cover.warmup, ", ".join(cover.dropped))
    if cover.masked > cover.warmup_cells:
        log.warning("%d symbol-bars masked beyond warm-up (late listings, gaps, early ends); see %s",
                    cover.masked - cover.warmup_cells, report)
    return ValidateResult(len(bars), len(good), len(bad), out, report, len(splits), cover.bars,
                          len(cover.per_symbol), cover.masked, cover.warmup_cells, cover.dropped)


validate_task = task(
    validate, name="validate", persist_result=True,
    # features: the report's coverage depends on features.min_history
    cache_key_fn=data_cache_key(("validation", "features"), lambda p: [p.dirs.validated, p.dirs.quarantine]),
)
