"""Stage 3, features: computing the feature set from the validated bars, whole or appended.

Indicators come from stockstats (the library FinRL itself uses), computed **once over the
full history** of each symbol, on its own real bars, and then sliced, so no window sees
truncated history (docs/data.md, features). The first ``warmup`` bars of the panel are dropped (the
market-wide risk features need them); each symbol is then tradable only where it has a real
bar and ``min_history`` real bars of its own (``tradable[T, n]``, ``tasks/data/tradable.py``).
A NaN or inf in a tradable cell is an error, never silently zeroed; untradable cells hold
NaN and are masked. Normalisation statistics are fitted on the tradable cells of the
training split only (``tasks/data/splits.py``) and saved beside the arrays, because serving
needs them (docs/data.md, contracts). What is written, and how it is read back, is the
contract in ``tasks/data/feature_set.py``; this module computes it.

The stage streams (docs/data.md, streaming at the paper's scale): the bars are read one symbol
at a time (``tasks/data/panel_store.py``), the indicators computed per symbol or per row block
(``tasks/data/indicators.py``), the arrays written a row block at a time and memory-mapped
on load. New bars that only extend the stored set are appended from a tail of history.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tasks.caching import current_version
from tasks.config import Params
from tasks.data.bars import VALIDATED, iter_symbols, recorded_version
from tasks.data.feature_set import ARRAYS, COVERAGE, META, NORM, SPLITS, FeatureSet, day, load, save_json
from tasks.data.indicators import Plan, block, market_series, symbol_columns
from tasks.data.panel_store import ColumnStore, NpyWriter, Scan, digest, same_rows, scan, symbol_rows
from tasks.data.splits import history_span, split_indices
from tasks.data.tradable import coverage, tradable_mask
from tasks.data.train_stats import CELLS, streamed_stats
from tasks.errors import DataError, MissingInput
from tasks.progress import Steps
from tasks.storage import atomic_dir

log = logging.getLogger("podracer.features")
HISTORY = "history.json"
"""The panel a saved set was computed from (bars, symbols, settings, per-symbol digests): what appending checks."""
PANEL, TRAIN = ".panel.tmp", ".train.tmp.npy"
"""Temporary files in the staging folder: the per-symbol columns, the train split's float64 indicators."""


@dataclass(frozen=True)
class Stored:
    """What appending to a saved feature set needs of it (``history.json`` and its metadata)."""

    folder: Path
    history: dict[str, Any]
    """The panel it was computed from: bars, last timestamp, symbols, raggedness, config, per-symbol digests."""
    symbols: list[str]
    splits: dict[str, tuple[int, int]]
    mean: np.ndarray
    std: np.ndarray

    @classmethod
    def read(cls, folder: Path) -> Stored | None:
        """The set saved in ``folder``, or None when there is none to append to (or it predates ``history.json``)."""
        names = [META, NORM, SPLITS, HISTORY, *(f"{a}.npy" for a in ARRAYS)]
        if not all((folder / name).exists() for name in names):
            return None
        norm = json.loads((folder / NORM).read_text())
        splits = json.loads((folder / SPLITS).read_text())
        return cls(folder, json.loads((folder / HISTORY).read_text()),
                   json.loads((folder / META).read_text())["symbols"],
                   {k: (v["first_index"], v["last_index"]) for k, v in splits.items()},
                   np.asarray(norm["mean"]), np.asarray(norm["std"]))

    def extended_by(self, scanned: Scan, plan: Plan, config: dict[str, Any]) -> bool:
        """Whether ``scanned`` can only extend this set: same settings and symbols, bounded
        indicators, the same raggedness, and its panel's rows continuing after this set's."""
        bars = int(self.history["panel_bars"])
        return (plan.bounded and self.history["config"] == config and self.history["symbols"] == scanned.symbols
                and self.history["ragged"] == scanned.ragged and bars <= len(scanned.index)
                and int(scanned.index[bars - 1]) == int(self.history["last"]))


class _Revised(Exception):
    """The bars, tradable symbols or train split under a stored set changed: build it whole."""


def _config(params: Params) -> dict[str, Any]:
    """The settings a stored set's rows depend on (the split dates act through the train split)."""
    return {**params.features.model_dump(mode="json", exclude={"train_start", "train_end", "val_end"}),
            "freq": params.data.freq}


def build(params: Params, out: Path) -> FeatureSet:
    """Compute the feature set from ``data/validated/`` into the folder ``out`` and return it
    memory-mapped (docs/data.md, features)."""
    _write(params, out, None)
    return load(out)


def check_validated(params: Params, path: Path) -> None:
    """Refuse a validated file validated from other raw data than ``data/raw/`` holds now (a
    new ingest, then no validation or a failed one): it records the data version it was
    validated from (``tasks/data/bars.py``). A file that records none, beside raw files, is
    refused too (it predates the record); with no raw files there is nothing to compare
    (validated bars placed by hand)."""
    if not any(params.dirs.raw.glob("*.parquet")):
        return
    recorded, current = recorded_version(path), current_version(params)
    if recorded != current:
        raise MissingInput(f"{path}: validated from data version {recorded or '(not recorded)'}, but "
                           f"{params.dirs.raw} now holds data version {current}; run `podracer validate`")


def _write(params: Params, out: Path, stored: Stored | None) -> tuple[FeatureSet, int | None]:
    """Write the feature set into ``out``, streaming per symbol and per row block: whole, or,
    when ``stored`` is a set the new bars only extend, its rows copied and only the new rows
    computed. Returns the set (arrays memory-mapped) and the bars appended (None: built whole)."""
    path = params.dirs.validated / VALIDATED
    if not path.exists():
        raise MissingInput(f"{path}: not found (run `podracer validate` first)")
    check_validated(params, path)
    scanned = scan(path)
    cfg, names, warm = params.features, list(params.features.indicators), params.features.warmup
    steps, n = len(scanned.index), len(scanned.symbols)
    if steps <= warm + 2:
        raise DataError(f"features: {steps} bars is too few for a {warm}-bar warm-up")
    plan = Plan(names, cfg, params.data.freq, scanned.ragged)
    if stored is not None and not stored.extended_by(scanned, plan, _config(params)):
        stored = None
    first = warm if stored is None else int(stored.history["panel_bars"])
    cuts = [int(scanned.index[-1])] if stored is None else [int(stored.history["last"]), int(scanned.index[-1])]
    real, digests = np.zeros((steps, n), bool), {}
    columns = ["ts", "open", "close", *(("high", "low", "volume") if plan.stockstats else ())]
    store = ColumnStore(out / PANEL, plan.fields, n, steps)
    try:
        steps = Steps(log, "features", n, "symbols")
        for j, (symbol, rows) in enumerate(iter_symbols(path, columns)):
            steps.step()
            placed = symbol_rows(rows, scanned.index)
            real[placed.positions, j] = True
            marks = digest(rows, cuts)
            if stored is not None and marks[0] != stored.history["digests"][symbol]:
                raise _Revised(f"the bars of {symbol} changed")
            digests[symbol] = marks[-1]
            store.write(symbol_columns(plan, placed, first))
        store.close()
        return _finish(params, out, scanned, plan, store, real, stored, digests)
    finally:
        store.discard()


def _finish(params: Params, out: Path, scanned: Scan, plan: Plan, store: ColumnStore, real: np.ndarray,
            stored: Stored | None, digests: dict[str, str]) -> tuple[FeatureSet, int | None]:
    """Pass 2 done: the tradable mask and splits, then the row blocks written, then the statistics."""
    cfg, names, warm, symbols = plan.cfg, plan.names, plan.cfg.warmup, scanned.symbols
    steps, n, k = len(scanned.index), len(symbols), len(names)
    first = warm if stored is None else int(stored.history["panel_bars"])
    tradable = tradable_mask(real, cfg.min_history)[warm:]
    ts = pd.to_datetime(scanned.index[warm:], utc=True)
    keep = tradable.any(axis=0)
    cols = slice(None) if keep.all() else np.flatnonzero(keep)  # a slice keeps the arrays' memory layout
    kept = [s for s, keeps in zip(symbols, keep) if keeps]
    try:
        splits: dict[str, tuple[int, int]] | None = split_indices(
            ts, cfg, history_span(params.data, pd.to_datetime(scanned.index, utc=True)))
        split_error = None
    except DataError as exc:
        splits, split_error = None, exc
    if stored is not None and (kept != stored.symbols or splits is None or splits["train"] != stored.splits["train"]):
        raise _Revised("its tradable symbols or its train split changed")
    series = market_series(plan, store.field("close"), first)
    bars, width = steps - warm, len(kept)
    writers = {"opens": NpyWriter(out / "opens.npy", np.float64, (bars, width)),
               "prices": NpyWriter(out / "prices.npy", np.float64, (bars, width)),
               "features": NpyWriter(out / "features.npy", np.float32, (bars, width, k)),
               "tradable": NpyWriter(out / "tradable.npy", np.bool_, (bars, width))}
    if stored is not None:
        for name, writer in writers.items():
            writer.copy_from(stored.folder / f"{name}.npy", first - warm)
    train = None
    if stored is None and splits is not None:
        lo, hi = splits["train"]
        train = NpyWriter(out / TRAIN, np.float64, (hi - lo + 1, width, k))
    bad_at, bad_cells = None, 0
    step = max(1, CELLS // max(n * k, 1))
    for a in range(first, steps, step):
        b = min(a + step, steps)
        mask = tradable[a - warm : b - warm]
        feats = block(plan, store, series, mask, a, b, first)
        bad = ~np.isfinite(feats)
        bad[:, :, plan.per_stock] &= mask[..., None]
        if bad.any():
            bad_cells += int(bad.sum())
            if bad_at is None:
                t, j, i = (int(x[0]) for x in np.nonzero(bad))
                bad_at = (a - warm + t, j, i)
        writers["features"].write(feats[:, cols].astype(np.float32))
        writers["opens"].write(store.rows("open", a, b)[:, cols])
        writers["prices"].write(store.rows("close", a, b)[:, cols])
        writers["tradable"].write(mask[:, cols])
        if train is not None:
            r0, r1 = max(a - warm, lo), min(b - warm, hi + 1)
            if r0 < r1:
                train.write(feats[r0 - a + warm : r1 - a + warm][:, cols])
    for writer in [*writers.values(), *([train] if train is not None else [])]:
        writer.close()
    np.save(out / "timestamps.npy", scanned.index[warm:].view("datetime64[ns]"))
    if bad_at is not None:
        t, j, i = bad_at
        raise DataError(f"features: {names[i]} is NaN/inf for {symbols[j]} at {ts[t]} after a {warm}-bar "
                        f"warm-up and {cfg.min_history} bars of its own ({bad_cells} cells); raise "
                        f"features.{'min_history' if i in plan.per_stock else 'warmup'}")
    if not keep.any():
        raise DataError(f"features: no symbol has {cfg.min_history} real bars (features.min_history) "
                        f"after a {warm}-bar warm-up")
    days = np.datetime_as_string(ts.tz_localize(None).to_numpy(), "D").tolist()
    cover = coverage(real[warm:], tradable, symbols, days)
    if not keep.all():
        log.warning("dropping %d symbol(s) never tradable (fewer than %d real bars): %s", int((~keep).sum()),
                    cfg.min_history, ", ".join(s for s, keeps in zip(symbols, keep) if not keeps))
    if not tradable[:, keep].all():
        log.warning("masking %d of %d symbol-bars as untradable (late listings, gaps, delistings, warm-up); "
                    "see features/%s", int((~tradable[:, keep]).sum()), tradable[:, keep].size, COVERAGE)
    if split_error is not None or splits is None:
        raise split_error or DataError("features: no splits")
    if stored is not None:
        mean, std = stored.mean, stored.std
    else:
        lo, hi = splits["train"]
        mean, std = streamed_stats(lambda a, b: np.load(out / TRAIN, mmap_mode="r")[a:b].copy(),
                                   tradable[lo : hi + 1][:, cols], k, cfg.normalise == "pooled")
        (out / TRAIN).unlink()
        std = np.where(std > 1e-12, std, 1.0)
    arrays = {name: np.load(out / f"{name}.npy", mmap_mode="r") for name in ARRAYS}
    fs = FeatureSet(**{**arrays, "tradable": tradable[:, cols]}, symbols=kept, feature_names=names, splits=splits,
                    mean=mean, std=std, coverage=cover)
    save_json(fs, out)
    (out / HISTORY).write_text(json.dumps({
        "panel_bars": steps, "last": int(scanned.index[-1]), "symbols": symbols, "ragged": scanned.ragged,
        "config": _config(params), "digests": digests}, indent=1))
    return fs, (None if stored is None else steps - first)


@dataclass(frozen=True)
class FeaturesResult:
    folder: Path
    bars: int
    symbols: int
    feature_names: list[str]
    splits: dict[str, tuple[str, str]]
    """Split name -> (first date, last date)."""
    appended: int = 0
    """Bars added to the stored feature set; every bar when there was none, or it was replaced."""


def appended_bars(old: Path | None, fresh: Path) -> int:
    """How many bars the feature set saved in ``fresh`` adds to the one saved in ``old``: the
    bars after ``old``'s, when ``old``'s rows and train-only statistics are ``fresh``'s
    unchanged; otherwise every bar (no stored set, other symbols or indicators, or a revised
    history, which is logged). Arrays are compared from the files, a chunk at a time."""
    bars = len(np.load(fresh / "timestamps.npy", mmap_mode="r"))
    if old is None or any(not (old / name).exists() for name in (META, NORM, *(f"{a}.npy" for a in ARRAYS))):
        return bars
    old_bars = len(np.load(old / "timestamps.npy", mmap_mode="r"))
    if json.loads((old / META).read_text()) != json.loads((fresh / META).read_text()) or old_bars > bars:
        return bars
    if all(same_rows(old / f"{a}.npy", fresh / f"{a}.npy") for a in ARRAYS) \
            and json.loads((old / NORM).read_text()) == json.loads((fresh / NORM).read_text()):
        return bars - old_bars
    log.warning("stored features differ from a recompute over the same bars (revised history): "
                "replaced by the recompute")
    return bars


def features(params: Params) -> FeaturesResult:
    """Build the feature set and write it under ``data/features/``.

    New bars extend the stored set (the continuous-training cycle, docs/operations.md): every
    indicator is causal, so the stored rows equal a full recompute's and only the new bars'
    rows are new, and the train split keeps its statistics. When the stored set's settings,
    symbols, train split and bars still hold and every indicator reads a bounded window
    (not stockstats' EMAs, which carry state from the first bar), only the new rows are
    computed, from a tail of history, and the stored rows are copied; otherwise the set is
    recomputed whole and compared with the stored one. The result says how many bars it appended.
    """
    folder = params.dirs.features
    stored = Stored.read(folder)
    with atomic_dir(folder) as staging:
        try:
            fs, appended = _write(params, staging, stored)
        except _Revised as why:
            log.info("features recomputed whole: %s", why)
            fs, appended = _write(params, staging, None)
        if appended is None:
            appended = appended_bars(folder if (folder / META).exists() else None, staging)
    log.info("features %s for %d symbols x %d bars (%d appended)", fs.feature_names, len(fs.symbols),
             len(fs.timestamps), appended)
    dates = {name: (day(fs.timestamps[lo]), day(fs.timestamps[hi])) for name, (lo, hi) in fs.splits.items()}
    return FeaturesResult(folder, len(fs.timestamps), len(fs.symbols), fs.feature_names, dates, appended)
