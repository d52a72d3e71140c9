"""Stage 4, train: generational evolution of a PPO population (finrl-podracer.txt §4.2–4.4).

Loads the feature set, trains with :func:`trainers.evolution.evolve` on the train split,
selects on the validation split only, and writes the best validation snapshot as a
policy bundle under ``data/models/`` with the leaderboard of every agent and generation.
"""

from __future__ import annotations

import hashlib
import json
import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch
from prefect import task
from prefect.cache_policies import NO_CACHE
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tasks import bundle, features, leaderboard
from tasks.config import Params
from tasks.errors import MissingInput
from tasks.ingest import current_version
from tasks.scaleout import job_runner
from tasks.storage import atomic_dir
from trainers import profiler
from trainers.agent import PPOAgent
from trainers.evolution import CHECKPOINT, EvolutionResult, evaluations_per_generation, evolve
from trainers.metrics import periods_per_year
from trainers.state import StateScales

log = logging.getLogger("podracer.train")
T = TypeVar("T")
PROFILE_FILES = ("profile.csv", "profile.json", "profile.png")


@dataclass(frozen=True)
class TrainResult:
    model_dir: Path
    best_fitness: float
    best_generation: int
    best_agent: int
    best_hparams: dict[str, float]
    env_steps: int
    seconds: float
    device: str
    profile: Path | None = None
    """The profile plot, when training was profiled."""


def pick_device(choice: str) -> torch.device:
    """``auto`` uses CUDA when present; CI and the default run use the CPU."""
    if choice == "auto":
        choice = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(choice)


def _annotations(count: int = 20_000) -> None:
    """A workload that is nothing but annotations, nested two deep (for calibration)."""
    for _ in range(count // 2):
        with profiler.operation("calibration"), profiler.operation("calibration"):
            pass


def profiled(run: Callable[[], T], iteration: Callable[[], object]) -> tuple[T, profiler.Report]:
    """Run ``run`` under the profiler (rl-scope-profiling.txt §3), corrected for book-keeping.

    The cost of one annotation does not depend on what it annotates (§3.4), so delta
    calibration (Appendix C.1) times a workload of bare annotations, where the delta is
    large against the noise. The correction's bias (Appendix C.3) is then measured on one
    real training ``iteration`` against an uninstrumented one, since training runs once.
    """
    per_event = profiler.calibrate(_annotations, repeats=5)
    biases = []
    for _ in range(3):  # alternate plain and profiled iterations; the median damps noise
        plain = time.perf_counter()
        iteration()
        plain = time.perf_counter() - plain
        profiler.enable(cuda=True)
        iteration()
        profiler.disable()
        biases.append(profiler.report(per_event, uninstrumented_seconds=plain).bias_percent or 0.0)
    bias = statistics.median(biases)
    profiler.set_phase("training")
    profiler.enable(cuda=True)
    try:
        result = run()
    finally:
        profiler.disable()
    report = profiler.report(per_event)
    log.info("profile (overhead %.2f µs per annotation, correction bias %+.1f%% on training iterations, median of 3):\n%s",
             per_event * 1e6, bias, report.table())
    return result, report


def save_profile(report: profiler.Report, folder: Path) -> None:
    """``profile.csv``, ``profile.json`` and the stacked-bar ``profile.png`` beside the model."""
    csv, data, png = (folder / name for name in PROFILE_FILES)
    report.to_csv(csv)
    data.write_text(json.dumps(report.to_dict(), indent=1))
    report.plot(png)


def state_scales(params: Params, fs: features.FeatureSet) -> StateScales:
    """The state's scaling constants: cash over initial cash, shares over hmax, prices over
    the first training bar's closes (saved with the model, so serving scales alike)."""
    return StateScales(
        cash_scale=1.0 / params.env.initial_cash,
        shares_scale=1.0 / params.env.hmax,
        price_ref=tuple(float(p) for p in fs.prices[fs.window("train")[0]]),
    )


def checkpoint_path(params: Params, data_version: str | None = None) -> Path:
    """The evolution checkpoint of this run. Its folder is named by the data version and
    every setting that shapes training, so ``--resume`` only ever continues the same run."""
    version = data_version or current_version(params)
    spec = [version, str(pick_device(params.train.device)), params.env, params.ppo, params.evolution,
            params.features.model_dump(mode="json")]
    return params.dirs.checkpoints / hashlib.sha256(repr(spec).encode()).hexdigest()[:16] / CHECKPOINT


def train(params: Params, data_version: str | None = None) -> TrainResult:
    """Train the population and write the best validation snapshot to ``data/models/``.

    ``data_version`` (the raw data's content hash) is recorded in the bundle; by default it
    is computed from ``data/raw/``.
    """
    fs = features.load(params.dirs.features)
    if data_version is None:
        data_version = current_version(params)
    device = pick_device(params.train.device)
    torch.manual_seed(params.evolution.seed)
    data = fs.market(device)
    train_window = fs.window("train")
    scales = state_scales(params, fs)
    evo = params.evolution
    started = time.perf_counter()
    with Progress(
        TextColumn("[bold]train[/] gen {task.fields[gen]}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("best val Sharpe {task.fields[best]}"), TimeElapsedColumn(), transient=False,
    ) as progress:
        total = evo.generations * evo.population * evaluations_per_generation(evo)
        bar = progress.add_task("train", total=total, gen=0, best="-")
        best = [float("-inf")]

        def on_evaluated(gen: int, agent: int, fitness: float) -> None:
            best[0] = max(best[0], fitness)
            progress.update(bar, advance=1, gen=gen + 1, best=f"{best[0]:.2f}")
            log.info("generation %d agent %d: validation %s %.3f", gen, agent, evo.fitness, fitness)

        checkpoints = checkpoint_path(params, data_version).parent
        if params.train.resume and not (checkpoints / CHECKPOINT).exists():
            raise MissingInput(f"{checkpoints / CHECKPOINT}: no checkpoint of this run (same data and config) "
                               "to resume; run without --resume")

        def run() -> EvolutionResult:
            with job_runner(params.train, gpu=device.type == "cuda") as runner:
                return evolve(
                    data, scales, params.env, params.ppo, evo, train_window, fs.window("validation"),
                    per_year=periods_per_year(params.data.freq), on_evaluated=on_evaluated,
                    checkpoint_dir=checkpoints, resume=params.train.resume, runner=runner,
                )

        if params.train.profile:
            agent = PPOAgent(data, scales, params.env, params.ppo, train_window, seed=evo.seed)
            result, report = profiled(run, agent.train_iteration)
        else:
            result, report = run(), None
    seconds = time.perf_counter() - started
    meta = bundle.PolicyMeta(
        symbols=fs.symbols, feature_names=fs.feature_names, mean=fs.mean.tolist(), std=fs.std.tolist(),
        scales=scales, env=params.env, net_dims=list(params.ppo.with_hparams(result.best_hparams).net_dims),
        freq=params.data.freq,
        data_version=data_version,
    )
    with atomic_dir(params.dirs.models) as staging:
        bundle.save(staging, {k: v.cpu() for k, v in result.best_actor.items()}, meta)
        board = leaderboard.table(result)
        board.to_csv(staging / leaderboard.LEADERBOARD, index=False)
        leaderboard.plot(board, staging / leaderboard.PLOT, params.evolution.fitness)
        if report is not None:
            save_profile(report, staging)
    log.info("best agent %d of generation %d, validation Sharpe %.3f, %.0f env steps/s",
             result.best_agent, result.best_generation, result.best_fitness, result.env_steps / seconds)
    return TrainResult(params.dirs.models, result.best_fitness, result.best_generation, result.best_agent,
                       result.best_hparams, result.env_steps, seconds, str(device),
                       params.dirs.models / PROFILE_FILES[2] if report is not None else None)


train_task = task(train, name="train", cache_policy=NO_CACHE)
