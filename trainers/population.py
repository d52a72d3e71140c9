"""One agent's share of a generation as a self-contained job (finrl-podracer.txt §4.2–4.3).

A job carries everything the agent needs (its hyperparameters, seed, full training state,
evaluator bookkeeping, budget and Nitro state) and returns everything it changed, with
what it cost, so a generation's jobs can run batched in this process, one after another,
or as Prefect tasks on Dask workers (§4.3's orchestration) with the same results
(:mod:`trainers.ppo.multiplex` runs them): each agent has its own random streams, and
restoring a state dict resumes an agent exactly.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

import torch

from trainers.common.env import MarketData
from trainers.common.nets import Actor
from trainers.common.state import StateScales
from trainers.config import EnvConfig, NitroConfig, PPOConfig, RuntimeConfig, SACConfig
from trainers.ppo.agent import PPOAgent
from trainers.ppo.nitro import BoostScore, CostLedger, actor_convexity, next_env_count
from trainers.ppo.ppo import Rollout
from trainers.sac.sac import SACAgent
from trainers.selection import STRUCTURAL

T = TypeVar("T")
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
    nitro: NitroConfig = NitroConfig()
    device: str | None = None
    """Where jobs train when ``data`` travels elsewhere (see :meth:`shipped`); None: ``data``'s device."""
    sac_cfg: SACConfig = SACConfig()
    """The SAC base of a pool that holds SAC agents (``tournament.algorithms``)."""
    runtime: RuntimeConfig = RuntimeConfig()
    """How the steps execute (``train.compile``, ``train.deterministic``, ``train.rng``)."""

    @property
    def rng_device(self) -> str | None:
        """Where the agents' random streams live: the CPU under ``train.rng: cpu``; None: the
        training device."""
        return "cpu" if self.runtime.rng == "cpu" else None

    def shipped(self) -> Setting:
        """This setting for another process: the data on the CPU (a Dask scheduler unpickles
        task arguments and need not have a GPU), its device named for the jobs."""
        return replace(self, data=self.data.to("cpu"), device=str(self.data.close.device))

    def base(self, algo: str = "ppo") -> PPOConfig | SACConfig:
        """The config an ``algo`` agent's hyperparameters apply to."""
        return self.sac_cfg if algo == "sac" else self.ppo_cfg

    def agent(self, hparams: Mapping[str, float], seed: int, state: dict[str, Any] | None = None,
              algo: str = "ppo") -> PPOAgent | SACAgent:
        """An ``algo`` agent with ``hparams`` applied to its base config: fresh, or restored
        from ``state`` (its ``state_dict()``, which the agent copies)."""
        agent: PPOAgent | SACAgent
        if algo == "sac":
            agent = SACAgent(self.data, self.scales, self.env_cfg, self.sac_cfg.with_hparams(hparams),
                             self.train_window, seed, self.rng_device)
        else:
            agent = PPOAgent(self.data, self.scales, self.env_cfg, self.ppo_cfg.with_hparams(hparams),
                             self.train_window, seed, self.rng_device)
        if state is not None:
            agent.load_state_dict(state)
        return agent

    def offspring(self, parent_hparams: Mapping[str, float], parent_seed: int, parent_state: dict[str, Any],
                  hparams: Mapping[str, float], seed: int,
                  algo: str = "ppo") -> tuple[dict[str, float], dict[str, Any]]:
        """A copy of a trained agent of the same ``algo`` (weights and optimizer state,
        deep-copied; a SAC agent's replay buffer too) with explored ``hparams`` and its own
        random streams and fresh envs: the selector's exploit step and the tournament
        generator's. Structural hyperparameters (the net width) are the parent's, since they
        fix the weights' shapes. Returns the child's hparams and state."""
        child = {**hparams, **{k: parent_hparams[k] for k in STRUCTURAL if k in parent_hparams}}
        parent = self.agent(parent_hparams, parent_seed, parent_state, algo)
        agent = self.agent(child, seed, algo=algo)
        agent.copy_from(parent)  # type: ignore[arg-type]  # same algo: same class
        agent.set_hparams(child)
        return child, agent.state_dict()

    def nominal_cost(self, hparams: Mapping[str, float], algo: str = "ppo") -> float:
        """Scheduled compute of one job with ``hparams``: env steps plus gradient samples
        over its iterations. Deterministic, so a simulated pool can order finishes by it."""
        if algo == "sac":
            sac = self.sac_cfg.with_hparams(hparams)
            return float(self.iterations * (sac.num_envs * sac.horizon + sac.updates * sac.batch_size))
        cfg = self.ppo_cfg.with_hparams(hparams)
        samples = cfg.learners * cfg.num_envs * cfg.horizon
        return float(self.iterations * samples * (1 + cfg.repeat_times))


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
    """The learner that trains the agent (``ppo`` or ``sac``)."""


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
    budget: int | None = None
    """Env steps this job may spend (its share of the run's hard budget); None: no limit."""
    boost: dict[str, Any] | None = None
    """Nitro's score state (the agent's recent R values and round count), carried from job to job."""
    algo: str = "ppo"
    """The learner: ``ppo`` (:mod:`trainers.ppo.ppo`) or ``sac`` (:mod:`trainers.sac.sac`)."""
    records: list[AgentRecord] = field(default_factory=list)
    cost: CostLedger = field(default_factory=CostLedger)
    """What the job spent: env steps and CPU/GPU seconds (nitro §5.3's cost ledger)."""


def stopped(job: AgentJob, setting: Setting, next_round: int) -> bool:
    """Does this agent rest: the evaluator stopped it (fitness fell ``patience`` evaluations in
    a row), or a round of ``next_round`` env steps would overrun its budget?"""
    return (setting.patience > 0 and job.falls >= setting.patience) or not job.cost.affordable(next_round)


def boost(job: AgentJob, actor: Actor, rollout: Rollout, setting: Setting, clip: float) -> int:
    """Nitro after a round (nitro-serverless-boosting.txt §5.2–5.3): the convexity ratio R of
    the new policy's surrogate on a subset of the round's rollout, the boosting score S_k over
    the agent's last ``window`` rounds, and the next round's env count I_k. The subset and
    the Lanczos start are drawn from a generator seeded by the agent's seed and round, so
    the choice is deterministic."""
    cfg = setting.nitro
    score = BoostScore(cfg.window, cfg.decay) if job.boost is None else BoostScore.from_state(job.boost)
    generator = torch.Generator(device=rollout.obs.device).manual_seed(job.seed * 7919 + score.rounds)
    level = score.update(actor_convexity(actor, rollout, cfg, clip, generator))
    job.boost = score.state()
    return next_env_count(level, cfg)


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
                                   job.cost.env_steps, job.algo))


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


class JobPool(Protocol):
    """Runs agent jobs concurrently and hands each back when it finishes (tournament mode,
    elegantrl-podracers.txt §3: a training pool with no generation barrier)."""

    def submit(self, job: AgentJob) -> None:
        """Start training ``job`` (:func:`trainers.ppo.multiplex.run_job` with the pool's :class:`Setting`)."""

    def next_finished(self) -> AgentJob:
        """Block until some submitted job finishes and return its result."""

    def pending(self) -> list[AgentJob]:
        """The inputs of the jobs submitted and not yet handed back (for checkpoints)."""
