"""Stage 4, train: generational evolution of a PPO population (finrl-podracer §4.2–4.4).

Loads the feature set, trains the run ``evolution.mode`` names
(:data:`trainers.population.modes.MODES`: generational evolution or a tournament) on the train
split, selects on the validation split only, and writes the best validation snapshot as a
policy bundle under ``data/models/`` with the leaderboard of every agent and generation. A
:class:`~tasks.model.plan.Plan` changes the windows, the start, the length and the output:
the continuous-training cycle's challenger (:mod:`tasks.model.walkforward`).
"""

from __future__ import annotations

import json
import logging
import math
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from tasks.caching import current_version
from tasks.config import Params
from tasks.data import feature_set
from tasks.errors import ConfigError, MissingInput, TrainingFailed
from tasks.model import bundle, leaderboard
from tasks.model.plan import Plan, checkpoint_dir, state_scales
from tasks.model.scaleout import ENGINES
from tasks.storage import atomic_dir
from trainers import profiler
from trainers.algorithms import ALGORITHMS, DEFAULT_LEARNER
from trainers.common.env import MarketData
from trainers.common.metrics import periods_per_year
from trainers.common.state import StateScales
from trainers.population.config import EvolutionConfig
from trainers.population.dispatch import set_deterministic
from trainers.population.evolution import EvolutionResult, ProgressFn, Run, evaluations_per_generation
from trainers.population.modes import MODES, modes_where

log = logging.getLogger("podracer.train")
PROFILE_FILES = ("profile.csv", "profile.json", "profile.png")
SUMMARY = "training.json"
"""Mode, engine, seconds and the cost ledger (env steps, CPU/GPU seconds) of the training run."""


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
    fitness: str = "sharpe"
    mode: str = "generational"
    engine: str = "multiplexed"
    profile: Path | None = None
    """The profile plot, when training was profiled."""
    resumed_env_steps: int = 0
    """Env steps the checkpoint had done before ``--resume``; ``seconds`` covers only the rest."""
    cutoff: str = ""
    """Date of the last bar training and selection saw (the registry version's ``data_cutoff``)."""
    start: str = ""
    """How the population started, when the plan says (e.g. "warm start from the champion")."""
    algorithm: str = DEFAULT_LEARNER
    """The learner of the best snapshot (a mixed tournament's may be ``sac``)."""
    ensemble: int = 1
    """Agents in the registered model (``registry.ensemble``)."""
    evaluations: int = 0
    """Validation evaluations the run made: the trials its choice was the best of."""
    luck: float = 0.0
    """The lead the best of those evaluations would have by luck alone (SR₀): how much of the
    chosen policy's validation fitness to expect to lose on new bars."""

    @property
    def session_env_steps(self) -> int:
        """Env steps run in ``seconds``: the whole run's, less what a resumed checkpoint had done."""
        return self.env_steps - self.resumed_env_steps

    @property
    def env_steps_per_second(self) -> float:
        return self.session_env_steps / self.seconds if self.seconds > 0 else 0.0

    def describe(self) -> str:
        """Which snapshot won, and what training cost, in one line."""
        where = MODES[self.mode].best_at(self.best_agent, self.best_generation, self.algorithm)
        steps = f"{self.env_steps:,} env steps"
        if self.resumed_env_steps:
            steps += f", {self.session_env_steps:,} of them after resuming"
        luck = (f"; the best of {self.evaluations} evaluations would lead by {self.luck:.2f} by luck alone"
                if self.evaluations > 1 else "")
        return (f"{self.start}; " if self.start else "") + (
            f"best validation {self.fitness} {self.best_fitness:.3f} ({where}), {steps} in "
            f"{self.seconds:.0f}s ({self.mode} on {self.engine}, {self.device}){luck}"
            + (f"; the model is an ensemble of the top {self.ensemble}" if self.ensemble > 1 else ""))


def pick_device(choice: str) -> torch.device:
    """``auto`` uses CUDA when present; CI and the default run use the CPU."""
    if choice == "auto":
        choice = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(choice)


def save_profile(report: profiler.Report, folder: Path) -> None:
    """``profile.csv``, ``profile.json`` and the stacked-bar ``profile.png`` beside the model."""
    csv, data, png = (folder / name for name in PROFILE_FILES)
    report.to_csv(csv)
    data.write_text(json.dumps(report.to_dict(), indent=1))
    report.plot(png)


class GenerationLog:
    """The evaluator's scores as one log line per generation, once all its evaluations are in:
    ``generation 3/32: best validation sharpe 0.910 (agent 2), mean 0.550``; in a pooled mode
    (a tournament), one line per job. Every agent is evaluated ``evaluations_per_generation`` times a
    generation (a halted one keeps its last score), which is also the progress bar's unit."""

    def __init__(self, evo: EvolutionConfig, pooled: bool) -> None:
        self.evo, self.pooled = evo, pooled
        self.expected = evaluations_per_generation(evo) * (1 if pooled else evo.population)
        self.scores: dict[tuple[int, int], list[tuple[int, float]]] = {}

    def add(self, gen: int, agent: int, fitness: float) -> None:
        key = (gen, agent if self.pooled else -1)
        self.scores.setdefault(key, []).append((agent, fitness))
        if len(self.scores[key]) == self.expected:
            self.line(key)

    def line(self, key: tuple[int, int]) -> None:
        scores = self.scores.pop(key)
        best, agent = max((fitness, -agent) for agent, fitness in scores)
        name = self.evo.fitness
        if self.pooled:
            log.info("job %d (lineage depth %d): best validation %s %.3f", key[1], key[0], name, best)
        else:
            mean = statistics.fmean(fitness for _, fitness in scores)
            log.info("generation %d/%d: best validation %s %.3f (agent %d), mean %.3f", key[0] + 1,
                     self.evo.generations, name, best, -agent, mean)

    def flush(self) -> None:
        """Log what is left (a generation cut short)."""
        for key in sorted(self.scores):
            self.line(key)


def new_run(params: Params, fs: feature_set.FeatureSet, data: MarketData, scales: StateScales,
            plan: Plan = Plan()) -> Run:
    """The training run ``evolution.mode`` asks for, on the plan's windows (by default the
    train split, selecting on validation)."""
    mode = MODES[params.evolution.mode]
    if plan.warm is not None and not mode.warm_start:
        raise ConfigError(f"a warm start (the CT cycle) needs evolution.mode: {modes_where(lambda m: m.warm_start)}")
    windows = (*plan.windows(fs), periods_per_year(params.data.freq))
    return mode.build(data, scales, params, windows, params.train.runtime, plan.warm)


def execute(run: Run, params: Params, on_evaluated: ProgressFn, folder: Path) -> EvolutionResult:
    """Run on the engine ``train.engine`` names, checkpointing into ``folder``: a generation's
    jobs go to the engine's runner, a pooled mode's (a tournament's) to its pool."""
    mode, engine = MODES[params.evolution.mode], ENGINES[params.train.engine]
    if not mode.pooled:
        with engine.runner(params.train, run.setting) as runner:
            return run.run(on_evaluated, folder, runner)
    if engine.batched:
        log.info("%s jobs run one at a time in this process (train.engine: dask spreads them)", mode.name)
    with engine.pool(params.train, run.setting) as pool:
        return run.run(on_evaluated, folder, pool)


@dataclass(frozen=True)
class Bar:
    """What a progress display shows of a training run: its title (mode and engine), the
    fitness it selects on, and the evaluations it runs (``completed`` before this session)."""

    title: str
    fitness: str
    total: int
    completed: int


Update = Callable[[str, float], None]
"""Told ``(where, best fitness so far)`` after each evaluation, e.g. ``("generation 3/32", 0.91)``."""
Display = Callable[[Bar], AbstractContextManager[Update]]
"""Shows a training run's progress while it is open (``flows/terminal.py::training_bar``)."""


@contextmanager
def no_display(bar: Bar) -> Iterator[Update]:
    """Shows nothing: training from code or a test."""
    yield lambda at, best: None


def train(params: Params, data_version: str | None = None, plan: Plan = Plan(),
          display: Display = no_display) -> TrainResult:
    """Train the population and write the best validation snapshot to ``data/models/``.

    ``data_version`` (the raw data's content hash) is recorded in the bundle; by default it
    is computed from ``data/raw/``. ``plan`` changes the windows, the start, the length and
    the output folder (the continuous-training cycle's challenger). ``display`` shows the
    progress (the CLI and the flows pass the terminal's bar).
    """
    fs = feature_set.load(params.dirs.features)
    if data_version is None:
        data_version = current_version(params)
    params = plan.configure(params, data_version)
    device = pick_device(params.train.device)
    set_deterministic(params.train.deterministic)
    if params.train.compile == "graphs" and device.type != "cuda":
        log.info("train.compile: graphs records CUDA graphs; on the %s the static step runs as it is", device)
    if params.train.compile == "kernel" and device.type != "cuda":
        raise ConfigError(f"train.compile: kernel runs the PPO update as a Triton kernel on CUDA, and train.device "
                          f"is {device}: use inductor, or a CUDA device (trainers/ppo/kernel.py)")
    torch.manual_seed(params.evolution.seed)
    data = fs.market(device)
    scales = state_scales(params, fs)
    evo = params.evolution
    run = new_run(params, fs, data, scales, plan)
    folder = checkpoint_dir(params, data_version, plan)
    out = plan.out or params.dirs.models
    if params.train.resume:
        try:
            run.resume(folder)
        except FileNotFoundError:
            raise MissingInput(f"{folder / run.CHECKPOINT}: no checkpoint of this run (same data and config) "
                               "to resume; run without --resume") from None
    resumed_env_steps = run.state.cost.env_steps
    mode = MODES[evo.mode]
    bar = Bar(f"{evo.mode} on {params.train.engine}", evo.fitness, run.jobs * evaluations_per_generation(evo),
              len(run.state.history))
    started = time.perf_counter()
    with display(bar) as update:
        best = [float("-inf")]
        lines = GenerationLog(evo, mode.pooled)

        def on_evaluated(gen: int, agent: int, fitness: float) -> None:
            best[0] = max(best[0], fitness)
            update(mode.progress(gen, agent, evo.generations), best[0])
            lines.add(gen, agent, fitness)

        report = None
        if params.train.profile:
            iteration = ALGORITHMS[DEFAULT_LEARNER].iteration(run.setting, evo.seed)  # beside the run: calibration
            result, measured = profiler.profiled(lambda: execute(run, params, on_evaluated, folder), iteration)
            report = measured.report
            log.info("profile (overhead %.2f µs per annotation, correction bias %+.1f%% on training iterations, "
                     "median of 3):\n%s", measured.per_event * 1e6, measured.bias_percent, report.table())
        else:
            result = execute(run, params, on_evaluated, folder)
        lines.flush()
    seconds = time.perf_counter() - started
    if not math.isfinite(result.best_fitness):
        raise TrainingFailed(f"train: no agent's policy kept a finite, positive account on the validation window "
                             f"in {len(result.history)} evaluations (every one diverged): nothing to register")
    weights, meta = bundle.policy_bundle(params, fs, scales, data_version, result)
    summary = {"mode": evo.mode, "engine": params.train.engine, "device": str(device), "seconds": seconds,
               "best_fitness": result.best_fitness, **{k: v for k, v in result.cost.as_dict().items() if v is not None},
               "resumed_env_steps": resumed_env_steps,  # of env_steps, those run before a resume
               "evaluations": len(result.history), "luck": result.luck}  # the chosen one's expected shrinkage
    with atomic_dir(out) as staging:
        bundle.save(staging, weights, meta, result.best_hparams)
        board = leaderboard.table(result)
        board.to_csv(staging / leaderboard.LEADERBOARD, index=False)
        leaderboard.plot(board, staging / leaderboard.PLOT, evo.fitness, evo.mode,
                         (result.best_generation, result.best_agent, result.best_fitness))
        (staging / SUMMARY).write_text(json.dumps(summary, indent=1))
        if report is not None:
            save_profile(report, staging)
    trained = TrainResult(out, result.best_fitness, result.best_generation, result.best_agent,
                          result.best_hparams, result.env_steps, seconds, str(device), evo.fitness, evo.mode,
                          params.train.engine, out / PROFILE_FILES[2] if report is not None else None,
                          resumed_env_steps, str(fs.timestamps[plan.windows(fs)[1][1]])[:10], plan.start,
                          result.best_algorithm, params.registry.ensemble, len(result.history), result.luck)
    log.info("%s; %.0f env steps/s, %.0f CPU-seconds", trained.describe(), trained.env_steps_per_second,
             result.cost.cpu_seconds)
    return trained
