"""Agent jobs trained with the one PPO (:class:`trainers.ppo.ppo.PPO`): a generation's agents as
one batched model on one device (gmi-drl §1 and §3: small DRL
trainers leave a device idle, so many share it; finrl-podracer §4.2's population is
such a set), or one agent alone as a population of one.

:func:`run_multiplexed` takes a generation's :class:`~trainers.common.jobs.AgentJob` s and
returns them trained and evaluated, every kernel serving all agents at once; a single PPO
job runs that way too (``trainers.algorithms.ALGORITHMS["ppo"].run``), which is what the
serial engine, a Dask task and a tournament job do. Every agent keeps its own random
streams, so it follows the same trajectory in either, up to floating-point summation order.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np
import torch

from trainers import profiler
from trainers.common.cost import CostLedger
from trainers.common.evaluate import Passes
from trainers.common.jobs import AgentJob, JobSetting, evaluation_due, fresh, record, stopped
from trainers.common.metrics import fitness
from trainers.common.nets import Actor
from trainers.ppo.agent import PPOAgent
from trainers.ppo.batched import BatchedNets
from trainers.ppo.nitro import BoostScore, actor_convexity, next_env_count
from trainers.ppo.ppo import PPO, Rollout


def boost(job: AgentJob, actor: Actor, rollout: Rollout, setting: JobSetting, clip: float) -> int:
    """Nitro after a round (nitro §5.2–5.3): the convexity ratio R of
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


class Multiplexed:
    """``agents`` as one batched model; an agent of ``ppo.learners: K`` is K rows of it,
    fused after every iteration. :meth:`finish` writes them back."""

    def __init__(self, setting: JobSetting, agents: Sequence[PPOAgent], kept: PPO | None = None,
                 evaluation: Evaluation | None = None) -> None:
        self.setting, self.agents, self.evaluation = setting, list(agents), evaluation
        self.rows: list[list[int]] = []
        """Each agent's learners' rows in the batched model."""
        for agent in self.agents:
            first = sum(len(rows) for rows in self.rows)
            self.rows.append(list(range(first, first + len(agent.learners))))
        learners = [lrn for a in self.agents for lrn in a.learners]
        envs = [env for a in self.agents for env in a.envs]
        if kept is not None and kept.reload(learners, envs):
            self.ppo = kept
        else:
            if kept is not None:
                kept.release()
            self.ppo = PPO(learners, envs, setting.ppo_cfg, setting.runtime)
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
        self.ppo.advance_average(rows)
        return [rollouts[rows.index(self.rows[i][0])] for i in group]

    def boost(self, jobs: Sequence[AgentJob], group: Sequence[int], rollouts: Sequence[Rollout]) -> None:
        """Nitro for each agent of ``group`` after its round: rescale its envs (nitro §5.3)."""
        for job, i, rollout in zip(jobs, group, rollouts):
            agent = self.agents[i]
            self.ppo.nets.write_back(self.rows[i][0], agent.actor)
            agent.resize_envs(boost(job, agent.actor, rollout, self.setting, agent.cfg.clip))
            job.hparams = {**job.hparams, "num_envs": float(agent.cfg.num_envs)}

    def evaluate(self) -> list[float]:
        """Every agent's policy's fitness on the validation window, in one pass of N accounts (§4.2),
        on the :class:`Evaluation` the last generation left when its networks' shapes fit."""
        s = self.setting
        self.ppo.check_capacity()  # the evaluation reads the device anyway
        nets = self.ppo.policy_nets().sub([rows[0] for rows in self.rows])
        if self.evaluation is None or not self.evaluation.fits(nets):
            if self.evaluation is not None:
                self.evaluation.passes.release()
            self.evaluation = Evaluation(nets, s)
        curves = self.evaluation(nets)
        return [fitness(s.fitness, curves[:, i], s.per_year) for i in range(curves.shape[1])]

    def actor_state(self, i: int) -> dict[str, torch.Tensor]:
        """Agent ``i``'s policy weights (unpadded copies; averaged with ``ppo.average``), e.g. for a snapshot."""
        actor = copy.deepcopy(self.agents[i].actor)
        self.ppo.policy_nets().write_back(self.rows[i][0], actor)
        return actor.state_dict()

    def finish(self) -> list[dict]:
        """Write the batched weights and Adam states back to the agents; their state dicts.
        The PPO stays as it is, for :meth:`~trainers.ppo.ppo.PPO.reload` or its release."""
        self.ppo.write_back()
        return [agent.state_dict() for agent in self.agents]


class Evaluation:
    """The population's validation pass kept from one evaluation, and generation, to the next: its
    own copy of the policies' weights, into which each evaluation copies the current ones, and the
    :class:`~trainers.common.evaluate.Passes` that trades them, so on CUDA the decision is recorded
    once a run rather than once an evaluation (docs/training.md, what a generation keeps)."""

    def __init__(self, nets: BatchedNets, s: JobSetting) -> None:
        self.nets = BatchedNets([p.clone() for p in nets.params], nets.widths, nets.layout, nets.price_ref, nets.fused)
        agents = len(nets.widths)

        def policy(states: torch.Tensor) -> torch.Tensor:  # [agents × chunks, S], each agent's chunks in a row
            return torch.tanh(self.nets.mean(states.view(agents, -1, states.shape[-1]))).flatten(0, 1)

        self.passes = Passes(policy, s.data, s.scales, s.env_cfg, s.val_window, accounts=agents,
                             compile=s.runtime.compile, chunks=s.eval_chunks)

    def fits(self, nets: BatchedNets) -> bool:
        """Whether ``nets`` can be copied into this evaluation's weights: the same agents, widths and shapes."""
        mine = self.nets
        return (nets.widths == mine.widths and nets.layout == mine.layout and nets.fused == mine.fused
                and all(a.shape == b.shape for a, b in zip(nets.params, mine.params)))

    @torch.no_grad()
    def __call__(self, nets: BatchedNets) -> np.ndarray:
        """Account values ``[T + 1, agents]`` of ``nets``' policies over the validation window."""
        for mine, new in zip(self.nets.params, nets.params):
            mine.copy_(new)
        return self.passes()


class KeptPPO:
    """The multiplexed engine's job runner for one run (``with KeptPPO() as runner``): each
    generation runs as :func:`run_multiplexed` runs it, and the PPO it trained on is kept and
    reloaded in place for the next (:meth:`~trainers.ppo.ppo.PPO.reload`), so the buffers,
    stacked envs and, on CUDA, recorded steps are made once a run rather than once a
    generation (docs/training.md, what a generation keeps); its :class:`Evaluation` is kept
    with it. A generation whose networks have other shapes gets a new PPO and evaluation.
    Closing lets go of them (a CUDA graph holds its memory while it lives)."""

    def __init__(self) -> None:
        self.ppo: PPO | None = None
        self.evaluation: Evaluation | None = None
        self.setting: JobSetting | None = None

    def __call__(self, jobs: list[AgentJob], setting: JobSetting) -> list[AgentJob]:
        if setting is not self.setting:
            self.close()
            self.setting = setting
        kept, evaluation = self.ppo, self.evaluation
        self.ppo, self.evaluation = None, None  # a generation that fails keeps nothing
        jobs, self.ppo, self.evaluation = _generation(jobs, setting, kept, evaluation)
        return jobs

    def close(self) -> None:
        if self.ppo is not None:
            self.ppo.release()
        if self.evaluation is not None:
            self.evaluation.passes.release()
        self.ppo, self.evaluation, self.setting = None, None, None

    def __enter__(self) -> KeptPPO:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def run_multiplexed(jobs: list[AgentJob], setting: JobSetting) -> list[AgentJob]:
    """Run a generation's jobs as one batched model: train, Nitro's rescaling, evaluate every
    ``eval_interval`` (keeping snapshots), patience and budgets, for all at once. A round's
    measured seconds are split over the agents in proportion to their env steps. The
    inputs are not changed."""
    with KeptPPO() as runner:
        return runner(jobs, setting)


def _generation(jobs: list[AgentJob], setting: JobSetting, kept: PPO | None,
                evaluation: Evaluation | None = None) -> tuple[list[AgentJob], PPO, Evaluation | None]:
    """:func:`run_multiplexed` on ``kept`` when it can be reloaded, evaluated on ``evaluation``
    when it fits; the jobs, and the PPO and evaluation they trained and were scored on."""
    jobs = [fresh(job) for job in jobs]
    pop = Multiplexed(setting, [PPOAgent.of(setting, job.hparams, job.seed, job.state) for job in jobs], kept,
                      evaluation)
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
    return jobs, pop.ppo, pop.evaluation
