"""One agent's share of a generation as a self-contained job (finrl-podracer.txt §4.2–4.3).

A job carries everything the agent needs (its hyperparameters, seed, full training state
and evaluator bookkeeping) and returns everything it changed, so a generation's jobs
can run one after another in this process or as Prefect tasks on Dask workers (§4.3's
orchestration) with bit-identical results: each agent has its own random streams, and
restoring a state dict resumes an agent exactly.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from trainers import profiler
from trainers.agent import PPOAgent
from trainers.env import EnvConfig, MarketData
from trainers.evaluate import run_policy
from trainers.metrics import FITNESS
from trainers.ppo import PPOConfig
from trainers.selection import STRUCTURAL
from trainers.state import StateScales

Snapshot = tuple[float, int, dict[str, torch.Tensor]]
"""Best fitness, the generation it was reached in, and the actor's weights then."""


@dataclass(frozen=True)
class Setting:
    """What every job of a run shares: the market, the MDP, the PPO base and the schedule."""

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

    def agent(self, hparams: Mapping[str, float], seed: int) -> PPOAgent:
        """A fresh agent with ``hparams`` applied to the PPO base."""
        return PPOAgent(self.data, self.scales, self.env_cfg, self.ppo_cfg.with_hparams(hparams),
                        self.train_window, seed)

    def offspring(self, parent_hparams: Mapping[str, float], parent_seed: int, parent_state: dict[str, Any],
                  hparams: Mapping[str, float], seed: int) -> tuple[dict[str, float], dict[str, Any]]:
        """A copy of a trained agent (weights and Adam state, deep-copied) with explored
        ``hparams`` and its own random streams and fresh envs: the selector's exploit step
        and the tournament generator's. Structural hyperparameters (the net width) are the
        parent's, since they fix the weights' shapes. Returns the child's hparams and state."""
        child = {**hparams, **{k: parent_hparams[k] for k in STRUCTURAL if k in parent_hparams}}
        parent = self.agent(parent_hparams, parent_seed)
        parent.load_state_dict(parent_state)
        agent = self.agent(child, seed)
        agent.copy_from(parent)
        agent.set_hparams(child)
        return child, agent.state_dict()

    def nominal_cost(self, hparams: Mapping[str, float]) -> float:
        """Scheduled compute of one job with ``hparams``: env steps plus gradient samples
        over its iterations. Deterministic, so a simulated pool can order finishes by it."""
        cfg = self.ppo_cfg.with_hparams(hparams)
        samples = cfg.learners * cfg.num_envs * cfg.horizon
        return float(self.iterations * samples * (1 + cfg.repeat_times))

    def evaluate(self, agent: PPOAgent) -> float:
        """Fitness of the deterministic policy on the validation window (§4.2)."""
        values = run_policy(agent.actor, self.data, self.scales, self.env_cfg, self.val_window)
        return FITNESS[self.fitness](values, self.per_year)


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


@dataclass
class AgentJob:
    """One agent in one generation, with its evaluator bookkeeping."""

    generation: int
    index: int
    hparams: dict[str, float]
    seed: int
    state: dict[str, Any]
    """``PPOAgent.state_dict()``: weights, optimizer, random streams, envs."""
    best: Snapshot
    last: float
    falls: int
    parent: int | None
    records: list[AgentRecord] = field(default_factory=list)
    env_steps: int = 0


def run_job(job: AgentJob, setting: Setting) -> AgentJob:
    """Train one agent for a generation, evaluating every ``eval_interval`` iterations and
    at the end; keep its best snapshot; stop training once its fitness has fallen
    ``patience`` evaluations in a row. Returns the updated job (the input is not changed)."""
    job = copy.copy(job)
    job.records, job.env_steps = [], 0
    agent = setting.agent(job.hparams, job.seed)
    agent.load_state_dict(job.state)
    for it in range(1, setting.iterations + 1):
        stopped = setting.patience > 0 and job.falls >= setting.patience
        if not stopped:
            profiler.set_phase("training")
            agent.train_iteration()
            job.env_steps += agent.samples_per_iteration
        if it % setting.eval_interval and it != setting.iterations:
            continue
        profiler.set_phase("evaluation")
        score = job.last if stopped else setting.evaluate(agent)
        if not stopped:
            job.falls = job.falls + 1 if score < job.last else 0
            job.last = score
            if score > job.best[0]:
                job.best = (score, job.generation, copy.deepcopy(agent.actor.state_dict()))
        job.records.append(AgentRecord(job.generation, job.index, it, score, dict(job.hparams), job.parent, stopped))
    job.state = agent.state_dict()
    return job


class JobPool(Protocol):
    """Runs agent jobs concurrently and hands each back when it finishes (tournament mode,
    elegantrl-podracers.txt §3: a training pool with no generation barrier)."""

    def submit(self, job: AgentJob) -> None:
        """Start training ``job`` (``run_job`` with the pool's :class:`Setting`)."""

    def next_finished(self) -> AgentJob:
        """Block until some submitted job finishes and return its result."""

    def pending(self) -> list[AgentJob]:
        """The inputs of the jobs submitted and not yet handed back (for checkpoints)."""
