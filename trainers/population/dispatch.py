"""A run's jobs, whichever learner trains them (finrl-podracer §4.2–4.3): the setting they
share, with what depends on the learner looked up in :data:`trainers.algorithms.ALGORITHMS`,
the one entry point that trains any job (:func:`run_job`), and the pool that runs them
concurrently in tournament mode.

The job itself and its evaluator bookkeeping are in ``trainers/common/jobs.py``, below the
learners, so each learner's runner keeps the same books.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Protocol

import torch

from trainers.algorithms import ALGORITHMS, DEFAULT_LEARNER, Config
from trainers.common.jobs import AgentJob, JobSetting, to_device
from trainers.population.selection import STRUCTURAL
from trainers.ppo.agent import PPOAgent
from trainers.sac.sac import SACAgent


class Setting(JobSetting):
    """What every job of a run shares (:class:`~trainers.common.jobs.JobSetting`), and the agents
    of each learner built on it."""

    def base(self, algorithm: str = DEFAULT_LEARNER) -> Config:
        """The config an ``algorithm`` agent's hyperparameters apply to."""
        return ALGORITHMS[algorithm].base(self)

    def agent(self, hparams: Mapping[str, float], seed: int, state: dict[str, Any] | None = None,
              algorithm: str = DEFAULT_LEARNER) -> PPOAgent | SACAgent:
        """An ``algorithm`` agent with ``hparams`` applied to its base config: fresh, or restored
        from ``state`` (its ``state_dict()``, which the agent copies)."""
        return ALGORITHMS[algorithm].agent(self, hparams, seed, state)

    def offspring(self, parent_hparams: Mapping[str, float], parent_seed: int, parent_state: dict[str, Any],
                  hparams: Mapping[str, float], seed: int,
                  algorithm: str = DEFAULT_LEARNER) -> tuple[dict[str, float], dict[str, Any]]:
        """A copy of a trained agent of the same ``algorithm`` (weights and optimizer state,
        deep-copied; a SAC agent's replay buffer too) with explored ``hparams`` and its own
        random streams and fresh envs: the selector's exploit step and the tournament
        generator's. Structural hyperparameters (the net width) are the parent's, since they
        fix the weights' shapes. Returns the child's hparams and state."""
        child = {**hparams, **{k: parent_hparams[k] for k in STRUCTURAL if k in parent_hparams}}
        parent = self.agent(parent_hparams, parent_seed, parent_state, algorithm)
        agent = self.agent(child, seed, algorithm=algorithm)
        agent.copy_from(parent)  # type: ignore[arg-type]  # same algorithm: same class
        agent.set_hparams(child)
        return child, agent.state_dict()

    def nominal_cost(self, hparams: Mapping[str, float], algorithm: str = DEFAULT_LEARNER) -> float:
        """Scheduled compute of one job with ``hparams``: env steps plus gradient samples
        over its iterations. Deterministic, so a simulated pool can order finishes by it."""
        return float(self.iterations * self.base(algorithm).with_hparams(hparams).iteration_cost())


def set_deterministic(on: bool) -> None:
    """``train.deterministic``: deterministic kernels only in this process (a CUDA run then
    repeats bit for bit on the same GPU). cuBLAS needs its fixed workspace set before its
    first call. A Dask worker is a process of its own, so :func:`run_job` sets it there too.
    Only a change is made: torch's switch imports its compiler stack (2 s at a command's start)."""
    if on:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if on != torch.are_deterministic_algorithms_enabled():
        torch.use_deterministic_algorithms(on)


def run_job(job: AgentJob, setting: JobSetting) -> AgentJob:
    """Train one agent for a generation (or a tournament job) with its learner's runner
    (``ALGORITHMS[job.algorithm].run``). On a :meth:`~JobSetting.shipped` setting it trains on the
    named device, under the run's ``train.deterministic``, and hands its state back on the
    data's. The input is not changed."""
    home = setting.data.close.device
    if setting.device is not None:  # shipped to another process: its switches too
        if setting.runtime.deterministic:
            set_deterministic(True)
        if torch.device(setting.device) != home:  # train on the named device
            setting = replace(setting, data=setting.data.to(setting.device), device=None)
    done = ALGORITHMS[job.algorithm].run(job, setting)
    done.state, done.best = to_device(done.state, home), to_device(done.best, home)
    return done


def gpu_turn(workers: Mapping[str, Mapping[str, Any]], turn: int) -> dict[str, Any]:
    """Where the ``turn``-th job of a run on CUDA goes: the Dask workers that offer the ``GPU``
    resource (``Client.scheduler_info()["workers"]``), in turn, as the keyword arguments of
    ``Client.submit``. Left to itself, Dask's scheduler sometimes puts two jobs on one worker,
    where the second waits for the first's GPU while another GPU idles; the preference is
    loose (``allow_other_workers``), so a job whose worker has gone runs elsewhere."""
    offering = sorted(address for address, worker in workers.items()
                      if worker.get("resources", {}).get("GPU", 0) >= 1)
    return {"workers": [offering[turn % len(offering)]], "allow_other_workers": True} if offering else {}


class JobPool(Protocol):
    """Runs agent jobs concurrently and hands each back when it finishes (tournament mode,
    elegantrl-podracers §3: a training pool with no generation barrier)."""

    def submit(self, job: AgentJob) -> None:
        """Start training ``job`` (:func:`run_job` with the pool's :class:`Setting`)."""

    def next_finished(self) -> AgentJob:
        """Block until some submitted job finishes and return its result."""

    def pending(self) -> list[AgentJob]:
        """The inputs of the jobs submitted and not yet handed back (for checkpoints)."""
