"""Stage 3, features: FinRL's technical indicators, date splits and train-only normalisation.

Indicators come from stockstats (the library FinRL itself uses), computed **once over the
full history** of each symbol, on its own real bars, and then sliced, so no window sees
truncated history (docs/data.md, features). The first ``warmup`` bars of the panel are dropped (the
market-wide risk features need them); each symbol is then tradable only where it has a real
bar and ``min_history`` real bars of its own (``tradable[T, n]``, ``tasks/data/tradable.py``).
A NaN or inf in a tradable cell is an error, never silently zeroed; untradable cells hold
NaN and are masked. Normalisation statistics are fitted on the tradable cells of the
training split only and saved beside the arrays, because serving needs them (docs/data.md,
contracts).
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from prefect import task

from tasks.caching import data_cache_key
from tasks.config import FeatureParams, Params
from tasks.data import momentum
from tasks.data.bars import VALIDATED, panel, read_parquet
from tasks.data.risk import turbulence, volatility_proxy
from tasks.data.splits import history_span, split_dates
from tasks.data.tradable import SymbolCoverage, coverage, tradable_mask
from tasks.errors import DataError, MissingInput
from tasks.storage import atomic_dir
from trainers.config import TURBULENCE
from trainers.env import MarketData
from trainers.metrics import periods_per_year
from trainers.state import normalise_features

log = logging.getLogger("podracer.features")
ARRAYS = ("opens", "prices", "features", "timestamps", "tradable")
"""Saved as ``<name>.npy`` so large sets are memory-mapped on load, not read whole."""
META, NORM, SPLITS, COVERAGE = "meta.json", "norm.json", "splits.json", "coverage.json"
SPLIT_NAMES = ("train", "validation", "test")


@dataclass
class FeatureSet:
    """The features contract: arrays plus the split manifest and normalisation stats."""

    opens: np.ndarray  # [T, n] float64
    prices: np.ndarray  # [T, n] float64 closes
    features: np.ndarray  # [T, n, k] float32, raw (not normalised); NaN where untradable; memory-mapped
    timestamps: np.ndarray  # [T] datetime64[ns] UTC
    symbols: list[str]
    feature_names: list[str]
    splits: dict[str, tuple[int, int]]  # name -> (first, last) bar index, inclusive
    mean: np.ndarray  # [n, k]
    std: np.ndarray  # [n, k]
    tradable: np.ndarray  # [T, n] bool: a real bar and min_history real bars of the symbol's own
    coverage: list[SymbolCoverage] = field(default_factory=list)
    """Per symbol (dropped ones too): real bars, and why the rest is masked (``coverage.json``)."""

    def market(self, device: torch.device | str = "cpu",
               norm: tuple[np.ndarray, np.ndarray] | None = None) -> MarketData:
        """Tensors for the env, indicators normalised with the train-only stats (``norm``:
        another model's ``(mean, std)``, e.g. a champion's bundle); the raw turbulence index
        (market-wide, the same in every stock's column) feeds the env's gate."""
        turb = None
        if TURBULENCE in self.feature_names:
            turb = torch.tensor(self.features[:, 0, self.feature_names.index(TURBULENCE)], dtype=torch.float64)
        feats = normalise_features(self.features, *(norm or (self.mean, self.std)))
        ragged = not bool(np.all(self.tradable))
        return MarketData(
            open=torch.tensor(self.opens, dtype=torch.float64),
            close=torch.tensor(self.prices, dtype=torch.float64),
            features=torch.as_tensor(np.where(self.tradable[..., None], feats, 0.0).astype(np.float32)
                                     if ragged else feats),
            turbulence=turb,
            tradable=torch.tensor(np.asarray(self.tradable, dtype=bool)) if ragged else None,
        ).to(device)

    def window(self, split: str) -> tuple[int, int]:
        """Env window for ``split``: it starts at the bar before the split, so the first
        fill lands on the split's first open and every marked close lies inside it."""
        lo, hi = self.splits[split]
        return (max(lo - 1, 0), hi)


MARKET_WIDE = ("turbulence", "vix_proxy")
"""Indicators of the whole market, the same in every stock's column and never masked."""


def indicators(wide: dict[str, pd.DataFrame], names: list[str], cfg: FeatureParams, freq: str,
               real: np.ndarray | None = None) -> np.ndarray:
    """``[T, n, k]`` indicators over the full history: per symbol with stockstats on its own
    real bars (``real`` ``[T, n]``; NaN where it has none), the market-wide risk features
    (``tasks/data/risk.py``; a symbol contributes a flat price where it has no bar) broadcast
    to every symbol, and the scale-free returns (``tasks/data/momentum.py``)."""
    from stockstats import wrap

    close = wide["close"].to_numpy(np.float64)
    real = np.ones(close.shape, dtype=bool) if real is None else real
    out = np.empty((*close.shape, len(names)), dtype=np.float64)
    risk = {
        "turbulence": lambda: turbulence(close, cfg.turbulence_window, cfg.turbulence_refresh),
        "vix_proxy": lambda: volatility_proxy(close, cfg.vix_window, periods_per_year(freq)),
    }
    per_stock = [(i, name) for i, name in enumerate(names) if name not in MARKET_WIDE and name not in momentum.NAMES]
    for i, name in enumerate(names):
        if name in MARKET_WIDE:
            out[:, :, i] = risk[name]()[:, None]
        elif name in momentum.NAMES:
            out[:, :, i] = momentum.feature(close, name, real)
    for j, symbol in enumerate(wide["close"].columns):
        rows = np.flatnonzero(real[:, j])
        out[:, j, [i for i, _ in per_stock]] = np.nan
        if not per_stock or rows.size == 0:
            continue
        own = {f: wide[f][symbol].to_numpy()[rows] for f in ("open", "high", "low", "close", "volume")}
        stats = wrap(pd.DataFrame(own))
        for i, name in per_stock:
            out[rows, j, i] = stats[name].to_numpy(dtype=np.float64)
    return out


def split_indices(ts: pd.DatetimeIndex, cfg: FeatureParams,
                  span: tuple[date, date] | None = None) -> dict[str, tuple[int, int]]:
    """Inclusive bar-index ranges of train (≤ train_end), validation (≤ val_end) and test;
    unset dates default to 75/12.5/12.5% of the history's ``span`` (``tasks/data/splits.py``)."""
    day = ts.tz_convert("UTC").tz_localize(None).normalize()
    train_day, val_day, how = split_dates(cfg, span)
    train_end, val_end = pd.Timestamp(train_day), pd.Timestamp(val_day)
    masks = {"train": day <= train_end, "validation": (day > train_end) & (day <= val_end), "test": day > val_end}
    out = {}
    for name, mask in masks.items():
        idx = np.flatnonzero(mask)
        if idx.size < 2:
            raise DataError(f"features: the {name} split has {idx.size} bars after warm-up (needs >= 2) with "
                            f"train_end {train_day} and val_end {val_day} from {how}; "
                            "set features.train_end / features.val_end to fit the data's dates")
        out[name] = (int(idx[0]), int(idx[-1]))
    return out


def _train_stats(train: np.ndarray, tradable: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per ``[n, k]`` mean and std over the tradable train cells; a symbol with no tradable
    train bar (listed later) takes the pooled statistics of the symbols that have some."""
    if tradable.all():
        return train.mean(axis=0), train.std(axis=0)
    cells = np.where(tradable[..., None], train, np.nan)
    seen = tradable.any(axis=0)
    if not seen.any():
        raise DataError("features: no symbol is tradable in the train split; lower features.min_history "
                        "or move features.train_end later")
    mean, std = np.zeros(train.shape[1:]), np.ones(train.shape[1:])
    mean[seen], std[seen] = np.nanmean(cells[:, seen], axis=0), np.nanstd(cells[:, seen], axis=0)
    pooled = cells[:, seen].reshape(-1, train.shape[2])
    mean[~seen], std[~seen] = np.nanmean(pooled, axis=0), np.nanstd(pooled, axis=0)
    return mean, std


def build(params: Params) -> FeatureSet:
    """Compute the feature set from ``data/validated/`` in memory (docs/data.md, ragged universes: a ragged
    universe keeps every symbol's own history, masked where it cannot trade)."""
    path = params.dirs.validated / VALIDATED
    if not path.exists():
        raise MissingInput(f"{path}: not found (run `podracer validate` first)")
    bars, _ = read_parquet(path)
    wide = panel(bars)
    real = wide.pop("real").to_numpy(bool)
    names, cfg = list(params.features.indicators), params.features
    feats = indicators(wide, names, cfg, params.data.freq, real)
    warm = cfg.warmup
    if len(wide["close"]) <= warm + 2:
        raise DataError(f"features: {len(wide['close'])} bars is too few for a {warm}-bar warm-up")
    symbols = [str(s) for s in wide["close"].columns]
    ts = pd.DatetimeIndex(wide["close"].index[warm:])
    tradable = tradable_mask(real, cfg.min_history)[warm:]
    feats, real = feats[warm:], real[warm:]
    per_stock = [i for i, name in enumerate(names) if name not in MARKET_WIDE]
    feats[:, :, per_stock] = np.where(tradable[..., None], feats[:, :, per_stock], np.nan)
    bad = ~np.isfinite(feats)
    bad[:, :, per_stock] &= tradable[..., None]
    if bad.any():
        t, j, i = (int(a[0]) for a in np.nonzero(bad))
        raise DataError(f"features: {names[i]} is NaN/inf for {symbols[j]} at {ts[t]} after a {warm}-bar "
                        f"warm-up and {cfg.min_history} bars of its own ({int(bad.sum())} cells); raise "
                        f"features.{'min_history' if i in per_stock else 'warmup'}")
    keep = tradable.any(axis=0)
    if not keep.any():
        raise DataError(f"features: no symbol has {cfg.min_history} real bars (features.min_history) "
                        f"after a {warm}-bar warm-up")
    dates = [_day(d) for d in ts.tz_convert("UTC").tz_localize(None).to_numpy("datetime64[ns]")]
    cover = coverage(real, tradable, symbols, dates)
    if not keep.all():
        log.warning("dropping %d symbol(s) never tradable (fewer than %d real bars): %s", int((~keep).sum()),
                    cfg.min_history, ", ".join(s for s, k in zip(symbols, keep) if not k))
    if not tradable[:, keep].all():
        log.warning("masking %d of %d symbol-bars as untradable (late listings, gaps, delistings, warm-up); "
                    "see features/%s", int((~tradable[:, keep]).sum()), tradable[:, keep].size, COVERAGE)
    splits = split_indices(ts, cfg, history_span(params.data, pd.DatetimeIndex(wide["close"].index)))
    lo, hi = splits["train"]
    cols = slice(None) if keep.all() else np.flatnonzero(keep)  # a slice keeps the arrays' memory layout
    mean, std = _train_stats(feats[lo : hi + 1][:, cols], tradable[lo : hi + 1][:, cols])
    return FeatureSet(
        opens=wide["open"].to_numpy(np.float64)[warm:, cols],
        prices=wide["close"].to_numpy(np.float64)[warm:, cols],
        features=feats[:, cols].astype(np.float32),
        timestamps=ts.tz_convert("UTC").tz_localize(None).to_numpy("datetime64[ns]"),
        symbols=[s for s, k in zip(symbols, keep) if k],
        feature_names=names,
        splits=splits,
        mean=mean,
        std=np.where(std > 1e-12, std, 1.0),
        tradable=tradable[:, cols],
        coverage=cover,
    )


def _day(ts: np.datetime64) -> str:
    return str(ts)[:10]


def save(fs: FeatureSet, out: Path) -> None:
    for name in ARRAYS:
        np.save(out / f"{name}.npy", getattr(fs, name))
    (out / META).write_text(json.dumps({"symbols": fs.symbols, "feature_names": fs.feature_names}))
    (out / NORM).write_text(json.dumps({"mean": fs.mean.tolist(), "std": fs.std.tolist()}))
    dates = {name: {"first": _day(fs.timestamps[lo]), "last": _day(fs.timestamps[hi]), "first_index": lo,
                    "last_index": hi} for name, (lo, hi) in fs.splits.items()}
    (out / SPLITS).write_text(json.dumps(dates, indent=1))
    (out / COVERAGE).write_text(json.dumps(coverage_summary(fs), indent=1))


def coverage_summary(fs: FeatureSet) -> dict[str, object]:
    """What the data layer dropped or masked (``coverage.json``, logged with the MLflow run):
    symbols dropped as never tradable, masked symbol-bars, and the per-symbol counts."""
    kept = set(fs.symbols)
    return {
        "symbols": len(fs.symbols),
        "bars": len(fs.timestamps),
        "masked_cells": int((~np.asarray(fs.tradable, dtype=bool)).sum()),
        "dropped_symbols": [c.symbol for c in fs.coverage if c.symbol not in kept],
        "per_symbol": [asdict(c) for c in fs.coverage],
    }


def load(out: Path) -> FeatureSet:
    """Read a saved feature set (the train, backtest and deliver stages start here)."""
    if not (out / META).exists():
        raise MissingInput(f"{out / META}: not found (run `podracer features` first)")
    stale = [name for name in ARRAYS if not (out / f"{name}.npy").exists()]
    if stale:
        raise MissingInput(f"{out}: no {stale[0]}.npy (an older feature set; run `podracer features` again)")
    arrays = {name: np.load(out / f"{name}.npy", mmap_mode="r") for name in ARRAYS}
    cover = json.loads((out / COVERAGE).read_text())["per_symbol"] if (out / COVERAGE).exists() else []
    meta = json.loads((out / META).read_text())
    norm = json.loads((out / NORM).read_text())
    splits = json.loads((out / SPLITS).read_text())
    return FeatureSet(
        **arrays, symbols=meta["symbols"], feature_names=meta["feature_names"],
        splits={k: (v["first_index"], v["last_index"]) for k, v in splits.items()},
        mean=np.asarray(norm["mean"]), std=np.asarray(norm["std"]),
        coverage=[SymbolCoverage(**c) for c in cover],
    )


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


def appended_bars(old: FeatureSet | None, fresh: FeatureSet) -> int:
    """How many bars ``fresh`` adds to the stored set ``old``: the bars after ``old``'s, when
    ``old``'s rows and train-only statistics are ``fresh``'s unchanged; otherwise every bar
    (no stored set, other symbols or indicators, or a revised history, which is logged)."""
    if old is None or old.symbols != fresh.symbols or old.feature_names != fresh.feature_names \
            or len(old.timestamps) > len(fresh.timestamps):
        return len(fresh.timestamps)
    n = len(old.timestamps)
    same = all(np.array_equal(getattr(old, a), getattr(fresh, a)[:n], equal_nan=True) for a in ARRAYS)
    if same and np.array_equal(old.mean, fresh.mean) and np.array_equal(old.std, fresh.std):
        return len(fresh.timestamps) - n
    log.warning("stored features differ from a recompute over the same bars (revised history): "
                "replaced by the recompute")
    return len(fresh.timestamps)


def features(params: Params) -> FeaturesResult:
    """Build the feature set and write it under ``data/features/``.

    New bars extend the stored set (the continuous-training cycle, docs/operations.md): every
    indicator is causal, so the stored rows equal a full recompute's and only the new bars'
    rows are new, and the train split keeps its statistics. The recompute runs on each
    symbol's whole series in memory, because stockstats' EMAs (macd, rsi, dx) carry state from
    the first bar; the result says how many bars it appended.
    """
    folder = params.dirs.features
    try:
        old = load(folder) if (folder / META).exists() else None
    except MissingInput:  # an older feature set: replaced whole
        old = None
    fs = build(params)
    appended = appended_bars(old, fs)
    with atomic_dir(folder) as staging:
        save(fs, staging)
    log.info("features %s for %d symbols x %d bars", fs.feature_names, len(fs.symbols), len(fs.timestamps))
    dates = {name: (_day(fs.timestamps[lo]), _day(fs.timestamps[hi])) for name, (lo, hi) in fs.splits.items()}
    return FeaturesResult(folder, len(fs.timestamps), len(fs.symbols), fs.feature_names, dates, appended)


features_task = task(
    features, name="features", persist_result=True,
    cache_key_fn=data_cache_key(("validation", "features"), lambda p: [p.dirs.validated, p.dirs.features]),
)
