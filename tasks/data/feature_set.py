"""The features contract: a feature set's arrays, splits and train-only statistics, and its files.

What training, the backtest and serving read (docs/data.md, contracts): opens and closes,
raw indicators (NaN where a symbol is untradable), timestamps, the tradable mask, the split
manifest and the normalisation statistics fitted on the training split. The arrays are saved
as ``<name>.npy`` so large sets are memory-mapped on load, not read whole; the rest is JSON
beside them. Computing the set is the features stage's job (``tasks/data/features.py``); this
module only holds, writes and reads it, so the stages downstream depend on the contract alone.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from tasks.data.tradable import SymbolCoverage
from tasks.errors import MissingInput
from trainers.common.env import MarketData
from trainers.common.sessions import intraday, session_last
from trainers.common.state import normalise_features
from trainers.config import TURBULENCE

ARRAYS = ("opens", "prices", "features", "timestamps", "tradable")
"""Saved as ``<name>.npy`` so large sets are memory-mapped on load, not read whole."""
META, NORM, SPLITS, COVERAGE = "meta.json", "norm.json", "splits.json", "coverage.json"


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
        (market-wide, the same in every stock's column) feeds the env's gate; on intraday bars,
        each session's last bar (``trainers/common/sessions.py``) feeds ``env.overnight: flatten``."""
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
            session_last=torch.from_numpy(session_last(self.timestamps)) if intraday(self.timestamps) else None,
        ).to(device)

    def window(self, split: str) -> tuple[int, int]:
        """Env window for ``split``: it starts at the bar before the split, so the first
        fill lands on the split's first open and every marked close lies inside it."""
        lo, hi = self.splits[split]
        return (max(lo - 1, 0), hi)


def day(ts: np.datetime64) -> str:
    """The calendar day of a bar's timestamp, ``YYYY-MM-DD``."""
    return str(ts)[:10]


def save(fs: FeatureSet, out: Path) -> None:
    """Write an in-memory feature set (the stage itself streams its arrays, ``tasks/data/features.py``)."""
    for name in ARRAYS:
        np.save(out / f"{name}.npy", getattr(fs, name))
    save_json(fs, out)


def save_json(fs: FeatureSet, out: Path) -> None:
    """Write the set's JSON files beside its arrays: symbols and names, statistics, splits, coverage."""
    (out / META).write_text(json.dumps({"symbols": fs.symbols, "feature_names": fs.feature_names}))
    (out / NORM).write_text(json.dumps({"mean": fs.mean.tolist(), "std": fs.std.tolist()}))
    dates = {name: {"first": day(fs.timestamps[lo]), "last": day(fs.timestamps[hi]), "first_index": lo,
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
