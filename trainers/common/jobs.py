"""One agent's share of a run as a self-contained job (finrl-podracer §4.2–4.3), whatever
learner trains it.

A job carries everything its agent needs (hyperparameters, seed, full training state,
evaluator bookkeeping, budget and Nitro state) and returns everything it changed, with what
it cost, so a generation's jobs can run batched in this process, one after another, or as
Prefect tasks on Dask workers (§4.3's orchestration) with the same results: each agent has
its own random streams, and restoring a state dict resumes an agent exactly. A learner's job
runner (``trainers/ppo/multiplex.py``, ``trainers/sac/runner.py``) takes jobs and a
:class:`JobSetting` and keeps the evaluator's books with :func:`stopped` and :func:`record`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Self, TypeVar

import torch

from trainers.common.cost import CostLedger
from trainers.common.env import MarketData
from trainers.common.state import StateScales
from trainers.config import EnvConfig, NitroConfig, PPOConfig, RuntimeConfig, SACConfig

T = TypeVar("T")
Snapshot = tuple[float, int, dict[str, torch.Tensor]]
"""Best fitness, the generation it was reached in, and the actor's weights then."""


@dataclass(frozen=True)
class JobSetting:
    """What every job of a run shares: the market, the MDP, each learner's base config and the
    schedule. :class:`trainers.population.dispatch.Setting` adds what depends on the learner."""

    data: MarketData
    scales: StateScales
    env_cfg: EnvConfig
    ppo_cfg: PPOConfig
    train_window: tuple[int, int]
    val_window: tuple[int, int]
    per_year: float
    fitness: str
    iterations: int
    eval_interval: int
    patience: int
    nitro: NitroConfig = NitroConfig()
    device: str | None = None
    """Where jobs train when ``data`` travels elsewhere (see :meth:`shipped`); None: ``data``'s device."""
    sac_cfg: SACConfig = SACConfig()
    """The SAC base of a pool that holds SAC agents (``tournament.algorithms``)."""
    runtime: RuntimeConfig = RuntimeConfig()
    """How the steps execute (``train.compile``, ``train.deterministic``, ``train.rng``)."""
    eval_chunks: int = 1
    """The validation window's stretches traded side by side (``evolution.eval_chunks``)."""

    @property
    def rng_device(self) -> str | None:
        """Where the agents' random streams live: the CPU under ``train.rng: cpu``; None: the
        training device."""
        return "cpu" if self.runtime.rng == "cpu" else None

    def shipped(self) -> Self:
        """This setting for another process: the data on the CPU (a Dask scheduler unpickles
        task arguments and need not have a GPU), its device named for the jobs."""
        return replace(self, data=self.data.to("cpu"), device=str(self.data.close.device))


@dataclass
class AgentRecord:
    """One evaluation of one agent: the leaderboard row and its lineage."""

    generation: int
    agent: int
    iteration: int
    fitness: float
    hparams: dict[str, float]
    parent: int | None
    """The agent this one was copied from at the start of the generation, if any."""
    stopped: bool = False
    """The agent rested: the evaluator's patience ran out, or its budget could not pay a round."""
    env_steps: int = 0
    """Env steps the agent had spent in this job when it was evaluated."""
    algorithm: str = "ppo"
    """The learner that trains the agent (a name in ``trainers.algorithms.ALGORITHMS``)."""


@dataclass
class AgentJob:
    """One agent in one generation, with its evaluator bookkeeping."""

    generation: int
    index: int
    hparams: dict[str, float]
    seed: int
    state: dict[str, Any]
    """The agent's ``state_dict()``: weights, optimizer, random streams, envs."""
    best: Snapshot
    last: float
    falls: int
    parent: int | None
    budget: int | None = None
    """Env steps this job may spend (its share of the run's hard budget); None: no limit."""
    boost: dict[str, Any] | None = None
    """Nitro's score state (the agent's recent R values and round count), carried from job to job."""
    algorithm: str = "ppo"
    """The learner (a name in ``trainers.algorithms.ALGORITHMS``): it picks the job's runner."""
    records: list[AgentRecord] = field(default_factory=list)
    cost: CostLedger = field(default_factory=CostLedger)
    """What the job spent: env steps and CPU/GPU seconds (nitro §5.3's cost ledger)."""

    def shipped(self) -> AgentJob:
        """This job for another process, as :meth:`JobSetting.shipped` sends the setting: its
        state and best snapshot on the CPU (a Dask scheduler unpickles it and need not have a GPU)."""
        return replace(self, state=to_device(self.state, "cpu"), best=to_device(self.best, "cpu"))


def stopped(job: AgentJob, setting: JobSetting, next_round: int) -> bool:
    """Does this agent rest: the evaluator stopped it (fitness fell ``patience`` evaluations in
    a row), or a round of ``next_round`` env steps would overrun its budget?"""
    return (setting.patience > 0 and job.falls >= setting.patience) or not job.cost.affordable(next_round)


def evaluation_due(iteration: int, eval_interval: int, iterations: int) -> bool:
    """Evaluate every ``eval_interval`` iterations and at the end of the generation."""
    return iteration % eval_interval == 0 or iteration == iterations


def record(job: AgentJob, iteration: int, score: float, halted: bool,
           snapshot: Callable[[], dict[str, torch.Tensor]]) -> None:
    """The evaluator's bookkeeping after one evaluation (§4.2): count falls, keep the best
    snapshot (``snapshot()`` copies the actor's weights only when needed), add the record.
    A ``halted`` agent keeps its last score and is not re-evaluated."""
    if not halted:
        job.falls = job.falls + 1 if score < job.last else 0
        job.last = score
        if score > job.best[0]:
            job.best = (score, job.generation, snapshot())
    job.records.append(AgentRecord(job.generation, job.index, iteration, score, dict(job.hparams), job.parent, halted,
                                   job.cost.env_steps, job.algorithm))


def fresh(job: AgentJob) -> AgentJob:
    """A copy of ``job`` for running: no records yet and nothing spent, within its budget."""
    job = copy.copy(job)
    job.records, job.cost = [], CostLedger(max_env_steps=job.budget)
    return job


def to_device(tree: T, device: torch.device | str) -> T:
    """``tree`` (dicts, lists and tuples of tensors) with every tensor on ``device``, except
    random generator states: those are CPU byte tensors on every device
    (``Generator.set_state`` takes nothing else), so byte tensors stay where they are."""
    if isinstance(tree, torch.Tensor):
        return tree if tree.dtype == torch.uint8 else tree.to(device)  # type: ignore[return-value]
    if isinstance(tree, dict):
        return {k: to_device(v, device) for k, v in tree.items()}  # type: ignore[return-value]
    if isinstance(tree, (list, tuple)):
        return type(tree)(to_device(v, device) for v in tree)  # type: ignore[return-value]
    return tree
