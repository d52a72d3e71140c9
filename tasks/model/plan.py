"""A training run's plan: where it trains and selects, what it starts from, how long it runs,
where it writes and checkpoints; and the state's scaling constants, which both the train
stage and the continuous-training cycle's warm-start check compute from the feature set.

The train stage (:mod:`tasks.model.train`) runs a plan; the pipeline's is the default one,
the cycle's challenger's is made by :mod:`tasks.model.walkforward` (docs/design.md, the
one-shot pipeline is the cycle with no champion; docs/operations.md, a killed cycle).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, replace
from pathlib import Path

from tasks.caching import current_version
from tasks.config import Params
from tasks.data import feature_set
from tasks.model.scaleout import ENGINES
from trainers.algorithms import Config, config_of
from trainers.common.state import StateScales
from trainers.population.evolution import CHECKPOINT, WarmStart
from trainers.population.modes import MODES

log = logging.getLogger("podracer.train")


def state_scales(params: Params, fs: feature_set.FeatureSet) -> StateScales:
    """The state's scaling constants: cash over initial cash, shares over hmax, prices over
    the first training bar's closes (saved with the model, so serving scales alike)."""
    return StateScales(
        cash_scale=1.0 / params.env.initial_cash,
        shares_scale=1.0 / params.env.hmax,
        price_ref=tuple(float(p) for p in fs.prices[fs.window("train")[0]]),
    )


@dataclass(frozen=True)
class Plan:
    """Where a training run trains and selects, what it starts from, how long it runs and
    where it writes. The default is the pipeline's: the train split, selection on the
    validation split, a cold start, ``evolution.generations``, ``data/models/``. The
    continuous-training cycle's plans are made by :mod:`tasks.model.walkforward`."""

    train_window: tuple[int, int] | None = None
    val_window: tuple[int, int] | None = None
    warm: WarmStart | None = None
    out: Path | None = None
    warm_id: str = ""
    """Names the warm start (e.g. the champion's version) in the checkpoint folder's name."""
    generations: int | None = None
    """This run's generations (a cycle's ``ct.generations``); None: ``evolution.generations``."""
    resume: bool | None = None
    """None: ``train.resume`` (``--resume``) decides. True: continue from this run's checkpoint
    when it has one, so a killed cycle's retry ends as an unkilled one would. False: afresh."""
    start: str = ""
    """How the population starts, said in the summary line (e.g. "warm start from the champion")."""

    def windows(self, fs: feature_set.FeatureSet) -> tuple[tuple[int, int], tuple[int, int]]:
        return self.train_window or fs.window("train"), self.val_window or fs.window("validation")

    def configure(self, params: Params, data_version: str) -> Params:
        """``params`` with this plan's generations and its resume decision."""
        if self.generations is not None:
            params = params.model_copy(update={"evolution": replace(params.evolution, generations=self.generations)})
        if self.resume is not None:
            resume = self.resume and (checkpoint_dir(params, data_version, self) / CHECKPOINT).exists()
            if resume:
                log.info("resuming from the checkpoint of this run (same data, config, windows and start)")
            params = params.model_copy(update={"train": params.train.model_copy(update={"resume": resume})})
        return params



def learners_beyond(params: Params) -> tuple[Config, ...] | None:
    """The configs of the pool's learners beyond PPO, whose section the checkpoint key names
    already; None for none, so a PPO run's folder keeps its name."""
    return tuple(c for c in (config_of(params, name) for name in params.tournament.algorithms)
                 if c is not params.ppo) or None


def checkpoint_dir(params: Params, data_version: str | None = None, plan: Plan = Plan()) -> Path:
    """The folder of this run's checkpoints. It is named by the data version and every
    setting that shapes training, so ``--resume`` only ever continues the same run; not by
    the device, so a run checkpointed on a GPU resumes on a CPU and back (trainers/common/draws.py)."""
    version = data_version or current_version(params)
    spec = [version, params.env, params.ppo, params.evolution,
            params.features.model_dump(mode="json"), params.nitro,
            MODES[params.evolution.mode].keyed(params),
            learners_beyond(params),
            ENGINES[params.train.engine].batched]  # the engines agree up to float summation order
    if (plan.train_window, plan.val_window, plan.warm_id) != (None, None, ""):  # the pipeline's names stay
        spec += [plan.train_window, plan.val_window, plan.warm_id]
    return params.dirs.checkpoints / hashlib.sha256(repr(spec).encode()).hexdigest()[:16]
