"""A SAC agent's job (:class:`trainers.sac.sac.SACAgent`) under the same schedule and evaluator
as a PPO job (finrl-podracer §4.2): ``iterations`` iterations within its budget and
patience, and an evaluation of its deterministic policy on the validation window every
``eval_interval``. Nitro rescales PPO's rounds only (it reads PPO's surrogate).
"""

from __future__ import annotations

import copy

import torch

from trainers import profiler
from trainers.common.evaluate import run_policies
from trainers.common.jobs import AgentJob, JobSetting, evaluation_due, fresh, record, stopped
from trainers.common.metrics import fitness
from trainers.sac.sac import SACAgent


def run_off_policy(job: AgentJob, setting: JobSetting) -> AgentJob:
    """Train one SAC job on the setting's device; the input is not changed."""
    job = fresh(job)
    agent = SACAgent.of(setting, job.hparams, job.seed, job.state)
    gpu = agent.actor.log_std.device.type == "cuda"
    halted = False
    for it in range(1, setting.iterations + 1):
        halted = halted or stopped(job, setting, agent.samples_per_iteration)
        if not halted:
            profiler.set_phase("training")
            with job.cost.meter(agent.samples_per_iteration, gpu):
                agent.train_iteration()
        if evaluation_due(it, setting.eval_interval, setting.iterations):
            profiler.set_phase("evaluation")
            score = job.last if halted else evaluate(agent.actor, setting)
            record(job, it, score, halted, lambda: copy.deepcopy(agent.actor.state_dict()))
    job.state = agent.state_dict()
    return job


def evaluate(actor: torch.nn.Module, setting: JobSetting) -> float:
    """One deterministic policy's fitness on the validation window (§4.2's evaluator)."""
    curve = run_policies(actor, setting.data, setting.scales, setting.env_cfg, setting.val_window, accounts=1,
                         compile=setting.runtime.compile, chunks=setting.eval_chunks)
    return fitness(setting.fitness, curve[:, 0], setting.per_year)
