"""The continuous-training cycle's steps, as plain functions (the flow is :mod:`flows.ct_cycle`).

One cycle (issue 13, §3): new bars → validation → features → a population warm-started from
the champion, trained for ``ct.generations`` and selected walk-forward
(:mod:`tasks.model.walkforward`) → challenger, champion and buy-and-hold backtested on the
same evaluation window → the champion-vs-challenger gate → registration with its report.
Everything a cycle writes lives under ``data/ct/``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import requests

from tasks.config import Params
from tasks.data import features
from tasks.data.bars import read_parquet
from tasks.data.ingest import ingest
from tasks.errors import DataError, PodracerError
from tasks.model import bundle
from tasks.model.backtest import CURVE_FILE, METRICS_FILE, PLOT_FILE, plot_equity, side_by_side
from tasks.model.train import Plan, TrainResult, checkpoint_dir, train
from tasks.model.walkforward import Windows, day, seen_bars, warm_start
from tasks.registry import report
from tasks.registry.gate import challenge, champion_version
from tasks.registry.register import Candidate
from tasks.registry.store import tracking_uri
from tasks.registry.versions import cutoff, fetch_bundle
from tasks.storage import atomic_dir, write_atomic
from trainers.evolution import CHECKPOINT
from trainers.metrics import periods_per_year

log = logging.getLogger("podracer.ct")
STATE = "state.json"
GATE_FILE, TEARSHEET_FILE = "gate.md", "tearsheet.html"


class TrackingDown(PodracerError):
    """The MLflow tracking server does not answer: the cycle stops before registering."""


@dataclass(frozen=True)
class NewData:
    """What the cycle's ingest found: the data version, and why there is nothing to do."""

    data_version: str
    last_bar: str
    nothing_new: str | None


def folders(params: Params) -> dict[str, Path]:
    root = params.dirs.ct
    return {name: root / name for name in ("challenger", "champion", "refit", "backtest", "report")}


def last_processed(params: Params) -> str | None:
    path = params.dirs.ct / STATE
    return json.loads(path.read_text()).get("data_version") if path.exists() else None


def record_processed(params: Params, data_version: str, outcome: dict[str, object]) -> None:
    """Remember the data version this cycle finished on (written last, atomically)."""
    write_atomic(params.dirs.ct / STATE, json.dumps({"data_version": data_version, **outcome}, indent=1))


def new_data(params: Params, champion_data_version: str | None) -> NewData:
    """Incremental ingest: fetched sources fetch only the bars after their coverage, up to
    today; the embedded market and files take what arrived in ``data/raw/`` (``podracer
    simulate``). Nothing new, when the data version is the one the last cycle (or, before
    any cycle, the champion) was trained on."""
    if params.data.source not in ("synthetic", "file"):
        params = params.model_copy(update={"data": params.data.model_copy(update={"end": date.today()})})
    version = ingest(params).data_version
    raw = sorted(params.dirs.raw.glob("*.parquet"))
    last = str(read_parquet(raw[0])[0]["ts"].max())[:10] if raw else "-"
    seen = last_processed(params) or champion_data_version
    why = None
    if version == seen:
        why = f"nothing new since data version {version[:8]} (last bar {last}): the cycle ends here"
    return NewData(version, last, why)


def with_features(params: Params) -> tuple[features.FeatureSet, int]:
    """The feature set extended by the new bars: the stored rows stay as they were and the new
    bars' rows are appended; normalisation keeps the original train split's stats.

    Every indicator is causal, so the new rows equal a full recompute's; stockstats' EMAs
    (macd, rsi, dx) carry state from the first bar, so the new rows are computed on each
    symbol's whole series in memory. Should the stored history differ from the recompute
    (revised bars), the recompute replaces it and the log says how many cells changed.
    Returns the feature set and the number of appended bars.
    """
    old = features.load(params.dirs.features) if (params.dirs.features / features.META).exists() else None
    fresh = features.build(params)
    appended = len(fresh.timestamps)
    if old is not None and old.symbols == fresh.symbols and old.feature_names == fresh.feature_names \
            and len(old.timestamps) <= len(fresh.timestamps):
        n = len(old.timestamps)
        same = all(np.array_equal(getattr(old, a), getattr(fresh, a)[:n], equal_nan=True) for a in features.ARRAYS)
        if same and np.array_equal(old.mean, fresh.mean) and np.array_equal(old.std, fresh.std):
            appended = len(fresh.timestamps) - n
            fresh = features.FeatureSet(
                **{a: np.concatenate([np.asarray(getattr(old, a)), getattr(fresh, a)[n:]]) for a in features.ARRAYS},
                symbols=old.symbols, feature_names=old.feature_names, splits=fresh.splits, mean=old.mean,
                std=old.std, coverage=fresh.coverage)
        else:
            log.warning("stored features differ from a recompute over the same bars (revised history): "
                        "replaced by the recompute")
    with atomic_dir(params.dirs.features) as staging:
        features.save(fresh, staging)
    return fresh, appended


def cycle_params(params: Params) -> Params:
    """The config a cycle trains with: ``ct.generations`` generations, generational mode."""
    evo = replace(params.evolution, generations=params.ct.generations)
    return params.model_copy(update={"evolution": evo, "train": params.train.model_copy(update={"resume": False})})


@dataclass(frozen=True)
class Champion:
    version: str
    folder: Path
    cutoff: str | None
    data_version: str | None


def current_champion(params: Params) -> Champion | None:
    """The registry's champion, its bundle fetched into ``data/ct/champion/``."""
    version = champion_version(params.registry)
    if version is None:
        return None
    folder = fetch_bundle(params.registry, version, folders(params)["champion"])
    _, meta = bundle.load(folder)
    return Champion(version, folder, cutoff(params.registry, version), meta.data_version)


def train_challenger(params: Params, data_version: str, fs: features.FeatureSet, w: Windows,
                     champion: Champion | None, out: Path | None = None) -> tuple[TrainResult, str]:
    """Train the challenger walk-forward: warm from the champion when it fits, else cold.

    A killed cycle resumes: the checkpoint folder is named by the data, the config, the
    windows and the champion, so the retried (or next) run of the same cycle continues from
    its last finished generation and ends exactly as an uninterrupted one would.
    """
    warm, how = (None, "no champion: cold start") if champion is None else warm_start(params, fs, champion.folder)
    if champion is not None and warm is None:
        how = f"cold start: {how}"
    log.info("challenger: %s; trains to %s, selects on %s..%s, never sees %s..%s", how,
             day(fs.timestamps[w.train[1]]), day(fs.timestamps[w.select[0] + 1]), w.cutoff, w.first, w.last)
    plan = Plan(train_window=w.train, val_window=w.select, warm=warm, out=out or folders(params)["challenger"],
                warm_id=champion.version if champion and warm else "")
    cfg = cycle_params(params)
    resume = (checkpoint_dir(cfg, data_version, plan) / CHECKPOINT).exists()
    if resume:
        log.info("resuming the challenger's training from its checkpoint")
    cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"resume": resume})})
    return train(cfg, data_version, plan), how


@dataclass(frozen=True)
class Comparison:
    metrics: dict[str, dict[str, float]]
    curve: pd.DataFrame
    seen: int | None
    """Window bars the champion had trained or selected on (None: no champion)."""


def compare(params: Params, fs: features.FeatureSet, w: Windows, challenger: Path,
            champion: Champion | None) -> Comparison:
    """Backtest challenger, champion and buy-and-hold on the evaluation window, side by side."""
    policies = {"challenger": bundle.load(challenger)}
    if champion is not None:
        policies["champion"] = bundle.load(champion.folder)
    curve, metrics = side_by_side(fs, policies, w.eval, periods_per_year(params.data.freq),
                                  params.backtest.risk_free)
    out = folders(params)["backtest"]
    with atomic_dir(out) as staging:
        (staging / METRICS_FILE).write_text(json.dumps({**metrics, "start": w.first, "end": w.last}, indent=1))
        curve.to_csv(staging / CURVE_FILE)
        plot_equity(curve, staging / PLOT_FILE, f"Evaluation window {w.first} to {w.last}")
    return Comparison(metrics, curve, None if champion is None else seen_bars(fs, w, champion.cutoff))


def gate_report(params: Params, w: Windows, cmp: Comparison) -> tuple[bool, str, str, Path]:
    """The gate's verdict and reason, the markdown report and the HTML tearsheet (issue 13, §3.9)."""
    passed, reason = challenge(params.registry, cmp.metrics)
    per_year = periods_per_year(params.data.freq)
    arms = [report.Arm.of(name, cmp.curve[name], per_year, params.backtest.risk_free) for name in cmp.curve.columns]
    dates = (w.first, w.last)
    markdown = report.gate_table(arms, params.registry.gate_metric, params.registry.gate_margin, passed, reason,
                                 dates, cmp.seen)
    out = folders(params)["report"]
    out.mkdir(parents=True, exist_ok=True)
    (out / GATE_FILE).write_text(markdown)
    benchmark = arms[1] if len(arms) == 3 else arms[-1]
    sheet = report.tearsheet(arms[0], benchmark, out / TEARSHEET_FILE,
                             f"Challenger vs {benchmark.name}, {w.first} to {w.last}")
    return passed, reason, markdown, sheet


def refit(params: Params, data_version: str, fs: features.FeatureSet, w: Windows, challenger: Path) -> Path:
    """``ct.refit``: continue the promoted challenger through the evaluation window, so the
    live model has seen the latest bars. Its best snapshot is picked on that same window,
    which it trains on: the live model is no longer scored on held-out data."""
    warm, how = warm_start(params, fs, challenger)
    if warm is None:
        raise DataError(f"ct.refit: the challenger cannot be refit ({how})")
    whole = Windows(train=(w.train[0], w.eval[1]), select=w.eval, eval=w.eval, cutoff=w.last, first=w.first,
                    last=w.last)
    plan = Plan(train_window=whole.train, val_window=whole.select, warm=warm, out=folders(params)["refit"],
                warm_id=f"refit-{data_version}")
    train(cycle_params(params), data_version, plan)
    return folders(params)["refit"]


def check_tracking(params: Params) -> None:
    """Fail in one line, before anything is registered, when the tracking server is down."""
    uri = tracking_uri(params.registry)
    if not uri.startswith("http"):
        return
    try:
        ok = requests.get(f"{uri}/health", timeout=5).status_code == 200
    except requests.RequestException:
        ok = False
    if not ok:
        raise TrackingDown(f"MLflow tracking server {uri} does not answer: nothing registered; "
                           "the next cycle will retry")


def candidate(params: Params, data_version: str, w: Windows, cmp: Comparison, model_dir: Path, passed: bool,
              reason: str, markdown: str, sheet: Path, how: str, refitted: bool) -> Candidate:
    """What the registry stage logs for a cycle's challenger."""
    back = folders(params)["backtest"]
    return Candidate(
        model_dir=model_dir, metrics={f"window_{arm}": m for arm, m in cmp.metrics.items()}, passed=passed,
        reason=reason, cutoff=w.last if refitted else w.cutoff, run_name=f"ct {date.today()} data {data_version[:8]}",
        origin="ct", report=markdown,
        artifacts=(("gate", folders(params)["report"] / GATE_FILE), ("gate", sheet),
                   *(("gate", back / name) for name in (METRICS_FILE, CURVE_FILE, PLOT_FILE))),
        tags=(("eval_window", f"{w.first}..{w.last}"), ("champion_seen_bars", str(cmp.seen)),
              ("warm_start", how), ("refit", str(refitted).lower())),
    )
