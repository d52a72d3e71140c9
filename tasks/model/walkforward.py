"""The continuous-training cycle's walk forward: its windows, its warm start, its training
plan and the window bars the champion has seen, built once by :func:`walk` from one read of
the feature set and handed to the train and backtest stages ready.

The newest ``ct.eval_bars`` bars are the **evaluation window**: challenger, champion and
buy-and-hold are compared there, and the challenger never sees them. The challenger trains
on the pipeline's train split (so the train-only normalisation and the state scales stay
those of the champion it warm-starts from) and selects on everything between the end of the
train split and the window. Its **data cutoff**, the last bar it trained or selected on, is
recorded on its registry version; a champion whose cutoff reaches into the window has seen
part of it, and the gate report says how much (finrl-podracer §4.2's evaluator, walked
forward in time; docs/operations.md, the CT cycle).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tasks.config import Params
from tasks.data import feature_set
from tasks.errors import DataError
from tasks.model import bundle
from tasks.model.plan import Plan, state_scales
from trainers.algorithms import DEFAULT_LEARNER
from trainers.population.evolution import WarmStart

log = logging.getLogger("podracer.ct")
CHALLENGER = "challenger"
"""The folder under ``data/ct/`` the challenger is written to."""


@dataclass(frozen=True)
class Champion:
    """The registry's champion as a cycle meets it (:func:`tasks.registry.versions.current_champion`)."""

    version: str
    folder: Path
    """Its policy bundle, fetched into ``data/ct/champion/``."""
    cutoff: str | None
    """The last bar it trained or selected on (None: registered before cutoffs were kept)."""
    data_version: str | None


@dataclass(frozen=True)
class Windows:
    """Bar indices (inclusive) of one cycle. Env windows start one bar before their first
    decision, as :meth:`tasks.data.feature_set.FeatureSet.window` does."""

    train: tuple[int, int]
    select: tuple[int, int]
    eval: tuple[int, int]
    cutoff: str
    """Date of the last bar the challenger trains or selects on: ``select[1]``."""
    first: str
    last: str
    """Dates of the evaluation window's first and last bars."""

    @property
    def eval_bars(self) -> int:
        return self.eval[1] - self.eval[0]


def day(ts: np.datetime64) -> str:
    return str(ts)[:10]


def windows(fs: feature_set.FeatureSet, eval_bars: int) -> Windows:
    """Split the feature set's bars into train, selection and evaluation windows.

    The evaluation window is the last ``eval_bars`` bars; selection runs from the bar after
    the train split up to the bar before the window. A one-line :class:`DataError` when the
    history is too short to leave two selection bars.
    """
    last = len(fs.timestamps) - 1
    train = fs.window("train")
    select_lo, select_hi = train[1] + 1, last - eval_bars
    if select_hi - select_lo < 1:
        raise DataError(f"ct: {last + 1} bars leave {max(select_hi - select_lo + 1, 0)} selection bars between "
                        f"the train split (to {day(fs.timestamps[train[1]])}) and the last {eval_bars} bars; "
                        "lower ct.eval_bars or features.train_end")
    return Windows(train=train, select=(select_lo - 1, select_hi), eval=(select_hi, last),
                   cutoff=day(fs.timestamps[select_hi]), first=day(fs.timestamps[select_hi + 1]),
                   last=day(fs.timestamps[last]))


def seen_bars(fs: feature_set.FeatureSet, w: Windows, champion_cutoff: str | None) -> int:
    """How many of the window's bars lie on or before the champion's data cutoff: the bars it
    trained or selected on. Unknown cutoff (a version registered before cutoffs were kept):
    assume it saw the whole window, the conservative choice."""
    dates = [day(t) for t in fs.timestamps[w.eval[0] + 1 : w.eval[1] + 1]]
    if champion_cutoff is None:
        return len(dates)
    return sum(d <= champion_cutoff for d in dates)


def warm_start(params: Params, fs: feature_set.FeatureSet, folder: Path) -> tuple[WarmStart | None, str]:
    """The champion bundle in ``folder`` as a warm start, or None and the reason it cannot
    be one (an ensemble or a policy another learner trained, whose weights are no PPO
    population member's; other symbols, indicators, state scales or network shape): the
    cycle then trains from scratch and says so."""
    actor, meta = bundle.load(folder)
    hparams = bundle.load_hparams(folder)
    if meta.members:
        return None, f"the champion is an ensemble of {len(meta.members)} agents"
    if meta.algorithm != DEFAULT_LEARNER:
        return None, f"the champion was trained by {meta.algorithm}"
    if meta.symbols != fs.symbols or meta.feature_names != fs.feature_names:
        return None, "the champion trades other symbols or indicators"
    if meta.scales != state_scales(params, fs) or not np.array_equal(np.asarray(meta.mean), fs.mean):
        return None, "the champion's state scaling differs from this data's train split"
    if hparams is None:
        return None, "the champion's bundle has no hparams.json (registered before warm starts)"
    shape = params.ppo.with_hparams(hparams).net_dims
    if tuple(meta.net_dims) != tuple(shape):
        return None, f"the champion's network {meta.net_dims} differs from this config's {list(shape)}"
    weights = {k: v.detach().clone() for k, v in actor.state_dict().items()}
    return WarmStart(hparams=hparams, actor=weights), "warm start from the champion"


def challenger_plan(params: Params, fs: feature_set.FeatureSet, w: Windows, champion: Champion | None) -> Plan:
    """The challenger's training: on ``w``'s train and selection windows of ``fs``, warm from
    the champion when it fits (else cold, saying why), for ``ct.generations``, into
    ``data/ct/challenger/``.

    A killed cycle resumes: the checkpoint folder is named by the data, the config, the
    windows and the champion, so the retried (or next) run of the same cycle continues from
    its last finished generation and ends exactly as an uninterrupted one would.
    """
    warm, how = (None, "no champion: cold start") if champion is None else warm_start(params, fs, champion.folder)
    if champion is not None and warm is None:
        how = f"cold start: {how}"
    log.info("challenger: %s; trains to %s, selects on %s..%s, never sees %s..%s", how,
             day(fs.timestamps[w.train[1]]), day(fs.timestamps[w.select[0] + 1]), w.cutoff, w.first, w.last)
    return Plan(train_window=w.train, val_window=w.select, warm=warm, out=params.dirs.ct / CHALLENGER,
                warm_id=champion.version if champion and warm else "", generations=params.ct.generations,
                resume=True, start=how)


@dataclass(frozen=True)
class Walk:
    """One cycle's walk forward, everything its train and backtest stages need, worked out
    from one read of the feature set: train (:attr:`plan`) runs it, backtest compares the
    challenger and :attr:`champion` on :attr:`windows`' evaluation window and reports
    :attr:`seen` (docs/operations.md, the CT cycle)."""

    windows: Windows
    plan: Plan
    """The challenger's training (:func:`challenger_plan`)."""
    champion: Champion | None
    seen: int | None
    """Evaluation-window bars the champion trained or selected on (:func:`seen_bars`); None: no champion."""


def walk(params: Params, champion: Champion | None) -> Walk:
    """The cycle's walk forward on the feature set in ``data/features/``, against ``champion``
    (None: the registry has none). A one-line :class:`DataError` when the history is too
    short for ``ct.eval_bars`` (:func:`windows`)."""
    fs = feature_set.load(params.dirs.features)
    w = windows(fs, params.ct.eval_bars)
    seen = None if champion is None else seen_bars(fs, w, champion.cutoff)
    return Walk(w, challenger_plan(params, fs, w, champion), champion, seen)
