"""Stage 2, validate: a Great Expectations 1.x suite plus order, calendar and gap checks.

Rows that fail a row-level check go to ``data/quarantine/<file>.parquet`` with a
``reason`` column; the rest go to ``data/validated/bars.parquet``. Rows in = rows out +
rows quarantined, and ``data/raw/`` is never modified. If more than
``validation.max_bad_fraction`` of the rows fail, the stage stops with one line naming
each offending file and its count. A close, or an open, beyond
``validation.max_abs_log_return`` from the last kept close is quarantined too
(``tasks/data/limits.py``), and so is an infinite price or volume (``tasks/data/checks.py``).
``report.md`` (kept with the quarantine and logged to MLflow) lists the counts per check,
the hard-limit rows, the flagged return outliers, any suspected split, and the coverage of
the kept bars (docs/data.md, what is counted): the symbols that would never be tradable and the symbol-bars the
tradable mask will hide, by cause. Nothing the data layer drops or masks is silent.

The raw files stream through in symbol order, one batch of whole files at a time (one file,
one symbol, at the paper's 10 years of minutes; about ``GX_CHUNK_ROWS`` rows of small files):
every check runs on every row of the batch, its good rows are appended to the validated file
(``tasks/data/bars.py``, ``BarsWriter``) and its bad rows written to the quarantine. Files
that share a symbol, or whose symbols interleave, go in one batch, so duplicates across files
are caught and the validated file stays sorted. Across batches only small summaries are
kept (:class:`Tally`, ``tasks/data/coverage.py``). Nothing appears half-written: the
validated file on success only (atomic rename over the last one, which stays readable
meanwhile: the paper broker serves its prices from it), the quarantine folder whole, and a
failed run removes the last validated file, so downstream never reads a stale set. The
validated file records the data version of the raw files it was validated from, which the
features stage checks against ``data/raw/`` (docs/data.md, validation). A killed run leaves at
most a temporary ``.bars.parquet.*.tmp`` beside it, which no reader opens and a later run
removes once it has not been written for :data:`ABANDONED` seconds.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from tasks.caching import data_version
from tasks.calendar import calendar_index
from tasks.config import Params
from tasks.data.bars import VALIDATED, BarsWriter, read_parquet, to_contract, write_parquet
from tasks.data.checks import (
    Gap,
    check_frequency,
    gap_failure,
    in_order,
    nanos,
    outliers,
    row_checks,
    runs,
    worst_gap,
)
from tasks.data.coverage import BarTimes, panel_coverage
from tasks.data.limits import limit_failures, suspected_splits
from tasks.data.report import Tally, write_report
from tasks.data.suite import GX_CHUNK_ROWS, Suite
from tasks.errors import DataError, MissingInput, ValidationFailed
from tasks.progress import Steps
from tasks.storage import atomic_dir

log = logging.getLogger("podracer.validate")
REPORT = "report.md"
ABANDONED = 600.0
"""Seconds since its last write after which a validated file's temporary is a killed run's: a
run under way writes its row groups far more often (another validation, by hand beside the
services' cycle, must not lose the file it is writing)."""


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


@dataclass(frozen=True)
class RawFile:
    path: Path
    rows: int
    symbols: tuple[str, str] | None
    """Its first and last symbol as the contract reads them; None when the file cannot be surveyed."""


def survey(path: Path) -> RawFile:
    """A raw file's row count and symbol range: from the Parquet footer's statistics when they
    hold it (free), else from its ``symbol`` column alone."""
    try:
        source = pq.ParquetFile(path)
        meta, where = source.metadata, source.schema_arrow.get_field_index("symbol")
        stats = [meta.row_group(i).column(where).statistics for i in range(meta.num_row_groups)] if where >= 0 else []
        if stats and all(s is not None and s.has_min_max and s.null_count == 0 and s.logical_type.type == "STRING"
                         for s in stats):
            return RawFile(path, meta.num_rows, (min(s.min for s in stats), max(s.max for s in stats)))
        column = source.read(columns=["symbol"]).column("symbol")
    except (OSError, KeyError, pa.ArrowException):
        return RawFile(path, 0, None)  # loading it names what is wrong
    symbols = sorted(set(column.drop_null().unique().to_pandas().astype(str)))  # as to_contract reads them
    return RawFile(path, meta.num_rows, (symbols[0], symbols[-1]) if symbols else None)


def batches(files: list[RawFile], max_rows: int) -> list[list[RawFile]]:
    """Whole files in batches of whole symbols, in symbol order, of up to ``max_rows`` rows
    (one file may exceed it). Files whose symbol ranges overlap (they share a symbol, or their
    symbols interleave) go in one batch. A file that cannot be surveyed comes first, alone."""
    out: list[list[RawFile]] = [[f] for f in files if f.symbols is None]
    groups: list[tuple[list[RawFile], str]] = []  # (files, last symbol)
    for f in sorted((f for f in files if f.symbols is not None), key=lambda f: f.symbols):
        first, last = f.symbols  # type: ignore[misc]
        if groups and first <= groups[-1][1]:
            groups[-1] = ([*groups[-1][0], f], max(groups[-1][1], last))
        else:
            groups.append(([f], last))
    batch: list[RawFile] = []
    for group, _ in groups:
        if batch and sum(f.rows for f in batch) + sum(f.rows for f in group) > max_rows:
            out.append(batch)
            batch = []
        batch += group
    if batch:
        out.append(batch)
    return [sorted(b, key=lambda f: f.path) for b in out]


def load(batch: list[RawFile], freq: str, files: list[str]) -> pd.DataFrame:
    """A batch's raw files in file order, shape-checked; ``_file`` (categories ``files``)
    remembers where a row came from."""
    frames = []
    for raw in batch:
        path = raw.path
        frame, recorded = read_parquet(path)
        if recorded not in (None, freq):
            raise DataError(f"{path}: holds {recorded} bars but data.freq is {freq}")
        if frame.empty:
            raise DataError(f"{path}: no rows")
        frame = to_contract(frame, str(path), sort=False)
        check_frequency(frame, freq, str(path))
        frame["_file"] = pd.Categorical.from_codes(np.full(len(frame), files.index(str(path))), categories=files)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def _all_reasons(bars: pd.DataFrame, params: Params, suite: Suite) -> pd.Series:
    """GX row failures merged with the calendar/order/symbol checks, one string per bad row."""
    lists: dict[int, list[str]] = {int(i): r.split("; ") for i, r in suite.failures(bars).items()}
    for reason, mask in row_checks(bars, params.data.freq, params.data.tickers).items():
        for i in np.flatnonzero(mask.to_numpy()):
            lists.setdefault(int(i), []).append(reason)
    return pd.Series({i: "; ".join(r) for i, r in sorted(lists.items())}, dtype=object)


def split_rows(bars: pd.DataFrame, params: Params, suite: Suite) -> tuple[pd.DataFrame, np.ndarray, pd.DataFrame]:
    """``(good, bounds, bad)`` of a batch of whole symbols: the good rows in (symbol, ts) order
    and their symbol runs (``checks.runs``); the bad ones in row order, with their ``reason``."""
    reasons = _all_reasons(bars, params, suite)
    good, bounds = in_order(bars.drop(index=reasons.index) if len(reasons) else bars)
    over = limit_failures(good, params.validation.max_abs_log_return, bounds)
    if len(over):
        reasons = pd.concat([reasons, over]).sort_index()
        good = good.drop(index=over.index)
        bounds = runs(good["symbol"].to_numpy())
    return good, bounds, bars.loc[reasons.index].assign(reason=reasons.values)


def read_ahead(plan: list[list[RawFile]], freq: str, files: list[str], pool: Executor) -> Iterator[pd.DataFrame]:
    """Each batch of ``plan`` loaded (:func:`load`), the next one read in ``pool`` while this one
    is checked: Parquet decoding and most of the coercions release the GIL, so on 2 cores
    reading hides behind checking. The first is read at once (while GX is imported). Errors
    surface in batch order, as without it."""
    reads = deque([pool.submit(load, plan[0], freq, files)] if plan else [])

    def loaded() -> Iterator[pd.DataFrame]:
        for following in [*plan[1:], None]:
            bars = reads.popleft().result()
            if following:
                reads.append(pool.submit(load, following, freq, files))
            yield bars

    return loaded()


class Run:
    """One validation run's batches: each is checked, its good rows appended to ``writer``
    (in ``pool``, while the next batch is checked; one batch at a time, in order), its bad
    rows written under ``staging``, and its summaries added to ``tally``."""

    def __init__(self, params: Params, files: list[str], staging: Path, writer: BarsWriter, pool: Executor) -> None:
        self.params, self.files, self.staging, self.writer, self.pool = params, files, staging, writer, pool
        self.suite, self.tally, self.times = Suite(), Tally(), BarTimes()
        self.gap: Gap | None = None
        self._writing: Future[None] | None = None

    def add(self, bars: pd.DataFrame) -> None:
        params, freq = self.params, self.params.data.freq
        good, bounds, bad = split_rows(bars, params, self.suite)
        self.tally.add_rows(len(bars))
        for name, group in bad.groupby("_file", observed=True):
            write_parquet(group.drop(columns="_file").reset_index(drop=True), self.staging / Path(str(name)).name,
                          freq)
            self.tally.add_bad(str(name), group["reason"])
        gap = worst_gap(good, freq, bounds)  # a tie names the first in file order, here and across batches
        if gap is not None and (self.gap is None or gap.bars > self.gap.bars or (
                gap.bars == self.gap.bars and self.files.index(gap.file) < self.files.index(self.gap.file))):
            self.gap = gap
        self.tally.add_flagged(outliers(good, params.validation.outlier_sigma, bounds))
        self.tally.add_splits(suspected_splits(good, bounds))
        if good.empty:
            return
        grid = calendar_index(freq, good["ts"].min(), good["ts"].max()).asi8
        ts = nanos(good["ts"])
        symbols = []
        for start, stop in zip(bounds[:-1], bounds[1:], strict=True):
            symbols.append(good.iloc[start:stop])
            self.times.add(str(good["symbol"].iat[start]), ts[start:stop], grid)
        self.written()
        self._writing = self.pool.submit(self._write, symbols)

    def _write(self, symbols: list[pd.DataFrame]) -> None:
        for rows in symbols:
            self.writer.write(rows)

    def written(self) -> None:
        """Wait until every batch added so far is in the validated file (its error, if any, is raised here)."""
        if self._writing is not None:
            self._writing.result()
            self._writing = None

    def coverage(self) -> tuple[np.ndarray, pd.DatetimeIndex, list[str]]:
        """The kept bars' ``[T, n]`` real mask, its times and symbols (``BarTimes.real``)."""
        span = self.times.span()
        grid = calendar_index(self.params.data.freq, *span).asi8 if span else np.array([], dtype=np.int64)
        return self.times.real(grid)


def validate(params: Params) -> ValidateResult:
    """Validate ``data/raw/``; write ``data/validated/`` and ``data/quarantine/``."""
    dirs, cfg, freq = params.dirs, params.validation, params.data.freq
    paths = sorted(dirs.raw.glob("*.parquet"))
    if not paths:
        raise MissingInput(f"{dirs.raw}: no Parquet files (run `podracer ingest` first)")
    files = [str(p) for p in paths]
    out = dirs.validated / VALIDATED
    for stale in dirs.validated.glob(f".{VALIDATED}.*.tmp"):  # a killed run's, not one still being written
        if time.time() - stale.stat().st_mtime > ABANDONED:
            stale.unlink(missing_ok=True)
    writer = BarsWriter(out, freq, data_version(paths))
    try:
        # two threads: one reads the next batch, one writes the last batch's rows (never the same file twice at once)
        with atomic_dir(dirs.quarantine) as staging, ThreadPoolExecutor(2, thread_name_prefix="validate") as pool:
            plan = batches([survey(p) for p in paths], GX_CHUNK_ROWS)
            loaded = read_ahead(plan, freq, files, pool)  # starts reading while GX is imported
            run = Run(params, files, staging, writer, pool)
            steps = Steps(log, "validate", len(plan), "batches")
            for bars in loaded:
                run.add(bars)
                steps.step()
            run.written()
            tally = run.tally
            cover = panel_coverage(*run.coverage(), params.features.min_history, params.features.warmup)
            write_report(staging / REPORT, tally, cover)
        report = dirs.quarantine / REPORT
        if tally.splits:
            first = tally.first_splits.iloc[0]
            log.warning("%d suspected split(s), e.g. %s at %s (%s): use split-adjusted data; see the validation "
                        "report", tally.splits, first["symbol"], first["ts"], first["split"])
        if tally.bad_rows / max(tally.rows_in, 1) > cfg.max_bad_fraction:
            raise ValidationFailed(f"validation failed: {tally.bad_rows} of {tally.rows_in} rows bad in "
                                   f"{tally.per_file()}; quarantined in {dirs.quarantine}/")
        gap_failure(run.gap, freq, cfg.max_gap_bars)
        writer.close()
    except BaseException:
        writer.abort()
        out.unlink(missing_ok=True)  # downstream must never read a stale validated set
        raise
    log.info("validated %d rows, quarantined %d, flagged %d outliers",  # pragma: no mutate
             writer.rows, tally.bad_rows, tally.flagged)
    if cover.dropped:
        log.warning("%d symbol(s) never tradable (fewer than %d real bars after the %d-bar warm-up), features "
                    "will drop them: %s", len(cover.dropped), cover.min_history, cover.warmup, ", ".join(cover.dropped))
    if cover.masked > cover.warmup_cells:
        log.warning("%d symbol-bars masked beyond warm-up (late listings, gaps, early ends); see %s",
                    cover.masked - cover.warmup_cells, report)
    return ValidateResult(tally.rows_in, writer.rows, tally.bad_rows, out, report, tally.splits, cover.bars,
                          len(cover.per_symbol), cover.masked, cover.warmup_cells, cover.dropped)
