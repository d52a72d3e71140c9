"""Agent jobs trained with the one PPO (:class:`trainers.ppo.ppo.PPO`): a generation's agents as
one batched model on one device (gmi-drl-gpu-multiplexing.txt §1 and §3: small DRL
trainers leave a device idle, so many share it; finrl-podracer.txt §4.2's population is
such a set), or one agent alone as a population of one.

:func:`run_multiplexed` takes a generation's :class:`~trainers.population.AgentJob` s and
returns them trained and evaluated, every kernel serving all agents at once;
:func:`run_job` runs one job that way, which is what the serial engine, a Dask task and a
tournament job do. Every agent keeps its own random streams, so it follows the same
trajectory in either, up to floating-point summation order.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import replace

import torch

from trainers import profiler
from trainers.common.evaluate import run_policies
from trainers.common.metrics import FITNESS
from trainers.population import AgentJob, Setting, boost, evaluation_due, fresh, record, stopped, to_device
from trainers.ppo.agent import PPOAgent
from trainers.ppo.nitro import CostLedger
from trainers.ppo.ppo import PPO, Rollout


class Multiplexed:
    """``agents`` as one batched model; an agent of ``ppo.learners: K`` is K rows of it,
    fused after every iteration. :meth:`finish` writes them back."""

    def __init__(self, setting: Setting, agents: Sequence[PPOAgent]) -> None:
        self.setting, self.agents = setting, list(agents)
        self.rows: list[list[int]] = []
        """Each agent's learners' rows in the batched model."""
        for agent in self.agents:
            first = sum(len(rows) for rows in self.rows)
            self.rows.append(list(range(first, first + len(agent.learners))))
        self.ppo = PPO([lrn for a in self.agents for lrn in a.learners], [env for a in self.agents for env in a.envs],
                       setting.ppo_cfg, setting.runtime)
        self.device = self.ppo.device

    def train_iteration(self, group: Sequence[int]) -> list[Rollout]:
        """One PPO iteration of the agents in ``group``, their learners fused after it; the
        others rest, their envs and random streams untouched, as if they had not been called.
        Returns each trained agent's first learner's rollout (what Nitro's detector inspects)."""
        rows = [r for i in group for r in self.rows[i]]
        rollouts = self.ppo.train_iteration(rows)
        for i in group:
            if len(self.rows[i]) > 1:
                with profiler.operation("fuse"):
                    self.ppo.fuse(self.rows[i])
        return [rollouts[rows.index(self.rows[i][0])] for i in group]

    def boost(self, jobs: Sequence[AgentJob], group: Sequence[int], rollouts: Sequence[Rollout]) -> None:
        """Nitro for each agent of ``group`` after its round: rescale its envs (nitro §5.3)."""
        for job, i, rollout in zip(jobs, group, rollouts):
            agent = self.agents[i]
            self.ppo.nets.write_back(self.rows[i][0], agent.actor)
            agent.resize_envs(boost(job, agent.actor, rollout, self.setting, agent.cfg.clip))
            job.hparams = {**job.hparams, "num_envs": float(agent.cfg.num_envs)}

    def evaluate(self) -> list[float]:
        """Every agent's fitness on the validation window, in one pass of N accounts (§4.2)."""
        s = self.setting
        nets = self.ppo.nets.sub([rows[0] for rows in self.rows])

        def policy(states: torch.Tensor) -> torch.Tensor:
            return torch.tanh(nets.mean(states.unsqueeze(1))).squeeze(1)

        curves = run_policies(policy, s.data, s.scales, s.env_cfg, s.val_window, accounts=len(self.agents),
                              compile=s.runtime.compile)
        return [FITNESS[s.fitness](curves[:, i], s.per_year) for i in range(curves.shape[1])]

    def actor_state(self, i: int) -> dict[str, torch.Tensor]:
        """Agent ``i``'s actor weights (unpadded copies), e.g. for a snapshot."""
        actor = copy.deepcopy(self.agents[i].actor)
        self.ppo.nets.write_back(self.rows[i][0], actor)
        return actor.state_dict()

    def finish(self) -> list[dict]:
        """Write the batched weights and Adam states back to the agents; their state dicts."""
        self.ppo.write_back()
        self.ppo.release()
        return [agent.state_dict() for agent in self.agents]


def run_multiplexed(jobs: list[AgentJob], setting: Setting) -> list[AgentJob]:
    """Run a generation's jobs as one batched model: train, Nitro's rescaling, evaluate every
    ``eval_interval`` (keeping snapshots), patience and budgets, for all at once. A round's
    measured seconds are split over the agents in proportion to their env steps. The
    inputs are not changed."""
    if any(job.algo != "ppo" for job in jobs):
        raise ValueError("the multiplexed engine batches PPO agents; other learners run one job at a time (run_job)")
    jobs = [fresh(job) for job in jobs]
    pop = Multiplexed(setting, [setting.agent(job.hparams, job.seed, job.state) for job in jobs])
    gpu = pop.device.type == "cuda"
    for it in range(1, setting.iterations + 1):
        rounds = [agent.samples_per_iteration for agent in pop.agents]
        halted = [stopped(job, setting, n) for job, n in zip(jobs, rounds)]
        group = [i for i, h in enumerate(halted) if not h]
        if group:
            profiler.set_phase("training")
            spent = CostLedger()
            with spent.meter(sum(rounds[i] for i in group), gpu):
                rollouts = pop.train_iteration(group)
                if setting.nitro.enabled:
                    pop.boost([jobs[i] for i in group], group, rollouts)
            for i in group:
                share = rounds[i] / spent.env_steps
                jobs[i].cost.charge(rounds[i], spent.cpu_seconds * share, spent.gpu_seconds * share)
        if not evaluation_due(it, setting.eval_interval, setting.iterations):
            continue
        profiler.set_phase("evaluation")
        scores = pop.evaluate() if group else [job.last for job in jobs]
        for i, job in enumerate(jobs):
            record(job, it, job.last if halted[i] else scores[i], halted[i], lambda i=i: pop.actor_state(i))
    for job, state in zip(jobs, pop.finish()):
        job.state = state
    return jobs


def run_off_policy(job: AgentJob, setting: Setting) -> AgentJob:
    """One SAC agent's job (:class:`trainers.sac.sac.SACAgent`) under the same schedule and
    evaluator as a PPO job: ``iterations`` iterations within its budget and patience, and
    an evaluation of its deterministic policy on the validation window every
    ``eval_interval``. Nitro rescales PPO's rounds only (it reads PPO's surrogate). The
    input is not changed."""
    job = fresh(job)
    agent = setting.agent(job.hparams, job.seed, job.state, job.algo)
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


def evaluate(actor: torch.nn.Module, setting: Setting) -> float:
    """One deterministic policy's fitness on the validation window (§4.2's evaluator)."""
    curve = run_policies(actor, setting.data, setting.scales, setting.env_cfg, setting.val_window, accounts=1,
                         compile=setting.runtime.compile)
    return FITNESS[setting.fitness](curve[:, 0], setting.per_year)


def run_job(job: AgentJob, setting: Setting) -> AgentJob:
    """Train one agent for a generation (or a tournament job): a PPO agent with
    :func:`run_multiplexed` on a population of one, a SAC agent with :func:`run_off_policy`.
    On a :meth:`Setting.shipped` setting it trains on the named device and hands its state
    back on the data's. The input is not changed."""
    home = setting.data.close.device
    if setting.device is not None and torch.device(setting.device) != home:  # shipped: train on the named device
        setting = replace(setting, data=setting.data.to(setting.device), device=None)
    done = run_off_policy(job, setting) if job.algo == "sac" else run_multiplexed([job], setting)[0]
    done.state, done.best = to_device(done.state, home), to_device(done.best, home)
    return done
