"""A generation's agents trained as one batched model on one device (gmi-drl-gpu-multiplexing.txt
§1 and §3: small DRL trainers leave a device idle, so many share it; finrl-podracer.txt §4.2's
population is such a set).

:func:`run_multiplexed` is a job runner like :func:`trainers.evolution.run_serially`: it
takes the generation's :class:`~trainers.population.AgentJob` s and returns them trained
and evaluated, but every kernel serves all agents at once. The agents' weights live in
:class:`~trainers.batched.BatchedNets` (zero-padded to the widest agent, exact), their Adam
states in :class:`~trainers.batched.BatchedAdam`, their envs in one
:meth:`~trainers.env.MarketEnv.stack`, and every per-agent hyperparameter (lr, clip,
entropy, γ, λ, number of envs, repeat times) is a tensor or a per-agent schedule, not a
constant. Each agent keeps its own random streams and draws them in the order
:class:`~trainers.ppo.PPOLearner` does, so an agent trained here follows the same
trajectory as when it trains alone, up to floating-point summation order.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from trainers import profiler
from trainers._checks import require
from trainers.agent import PPOAgent
from trainers.batched import BatchedAdam, BatchedNets
from trainers.env import MarketEnv
from trainers.evaluate import run_policies
from trainers.metrics import FITNESS
from trainers.nitro import CostLedger
from trainers.population import AgentJob, Setting, boost, evaluation_due, fresh, record, stopped
from trainers.ppo import PPOLearner, Rollout, clipped, gae_advantages

WIDTH_SPREAD = 1.5
"""Agents whose first hidden layers differ by more than this factor update in separate batched matmuls."""


@dataclass
class _Layout:
    """Where each agent's envs sit in the stacked env (flat) and in the padded ``[N, M]`` layout."""

    counts: list[int]
    """Envs per agent, on the host."""
    sizes: torch.Tensor
    """The same, as a tensor on the device."""
    offsets: torch.Tensor
    agent_of_env: torch.Tensor
    """``[E_total]`` the agent each flat env belongs to."""
    local_of_env: torch.Tensor
    """``[E_total]`` its position among that agent's envs."""
    width: int
    """``M``: envs of the largest agent."""

    @classmethod
    def of(cls, sizes: Sequence[int], device: torch.device) -> _Layout:
        size = torch.tensor(sizes, device=device)
        offsets = torch.cumsum(size, 0) - size
        agent = torch.repeat_interleave(torch.arange(len(sizes), device=device), size)
        local = torch.arange(sum(sizes), device=device) - offsets[agent]
        return cls(list(sizes), size, offsets, agent, local, max(sizes))

    def to_agents(self, x: torch.Tensor) -> torch.Tensor:
        """``[H, E_total, ...]`` → ``[N, H·M, ...]`` (padded slots repeat an agent's last env)."""
        h, total = x.shape[0], x.shape[1]
        local = torch.minimum(torch.arange(self.width, device=x.device), self.sizes.unsqueeze(1) - 1)
        cols = self.offsets.unsqueeze(1) + local
        steps = torch.arange(h, device=x.device).view(1, h, 1)
        index = (steps * total + cols.unsqueeze(1)).reshape(len(self.sizes), -1)
        return x.reshape(h * total, *x.shape[2:])[index]

    def from_agents(self, y: torch.Tensor, h: int) -> torch.Tensor:
        """Inverse of :meth:`to_agents`: ``[N, H·M, ...]`` → ``[H, E_total, ...]``."""
        steps = torch.arange(h, device=y.device).unsqueeze(1)
        index = self.agent_of_env * (h * self.width) + steps * self.width + self.local_of_env
        return y.reshape(-1, *y.shape[2:])[index]

    def samples(self, i: int, h: int) -> torch.Tensor:
        """Flat rollout rows of agent ``i`` in its own flattening order (``t·E_i + e``), which is
        how PPOLearner numbers the samples it permutes."""
        dev = self.sizes.device
        t = torch.arange(h, device=dev).unsqueeze(1)
        e = torch.arange(self.counts[i], device=dev).unsqueeze(0)
        return (t * sum(self.counts) + sum(self.counts[:i]) + e).reshape(-1)


class Multiplexed:
    """The agents of ``jobs`` as one batched model; :meth:`finish` writes them back."""

    def __init__(self, setting: Setting, jobs: Sequence[AgentJob]) -> None:
        require(setting.ppo_cfg.learners == 1, "the multiplexed engine trains one learner per agent (ppo.learners: 1)")
        self.setting = setting
        self.agents: list[PPOAgent] = []
        for job in jobs:
            agent = setting.agent(job.hparams, job.seed)
            agent.load_state_dict(job.state)
            self.agents.append(agent)
        self.learners: list[PPOLearner] = [a.learners[0] for a in self.agents]
        self.envs: list[MarketEnv] = [a.envs[0] for a in self.agents]
        self.device = self.envs[0].device
        self.nets = BatchedNets.stack([lrn.actor for lrn in self.learners], [lrn.critic for lrn in self.learners])
        self.adam = BatchedAdam(self.nets, self._hparam("lr", torch.float64))
        for i, learner in enumerate(self.learners):
            self.adam.load_state_of(i, learner.optimizer.state_dict())

    def _hparam(self, name: str, dtype: torch.dtype = torch.float32,
                group: Sequence[int] | None = None) -> torch.Tensor:
        """Hyperparameter ``name`` of the agents in ``group`` (all by default) as a tensor."""
        group = range(len(self.learners)) if group is None else group
        values = [float(getattr(self.learners[i].cfg, name)) for i in group]
        return torch.tensor(values, dtype=dtype, device=self.device)

    def train_iteration(self, group: Sequence[int]) -> list[Rollout]:
        """One PPO iteration (rollout + update) of the agents in ``group``; the others rest,
        their envs and random streams untouched, as if they had not been called. Returns each
        trained agent's part of the rollout (what Nitro's detector inspects)."""
        layout = _Layout.of([self.envs[i].num_envs for i in group], self.device)
        with torch.no_grad():
            rollout = self._collect(group, self.nets.sub(group), layout)
        self._update(group, layout, rollout)
        return rollout.split(layout.counts)

    def boost(self, jobs: Sequence[AgentJob], group: Sequence[int], rollouts: Sequence[Rollout]) -> None:
        """Nitro for each agent of ``group`` after its round: rescale its envs (nitro §5.3)."""
        for job, i, rollout in zip(jobs, group, rollouts):
            learner = self.learners[i]
            self.nets.write_back(i, learner.actor)
            self.agents[i].resize_envs(boost(job, learner.actor, rollout, self.setting, learner.cfg.clip))
            job.hparams = {**job.hparams, "num_envs": float(learner.cfg.num_envs)}

    @torch.no_grad()
    def _collect(self, group: Sequence[int], nets: BatchedNets, layout: _Layout) -> Rollout:
        """Step every agent's envs for ``horizon`` steps and compute GAE(λ) per agent; the same
        draws, in the same order, as :meth:`PPOLearner.collect` for each agent."""
        learners = [self.learners[i] for i in group]
        for learner, i in zip(learners, group):
            if learner._state is None:
                learner._state = self.envs[i].reset()
        env = MarketEnv.stack([self.envs[i] for i in group])
        h, total, dev = self.setting.ppo_cfg.horizon, env.num_envs, self.device
        states = torch.empty((h + 1, total, env.state_dim), device=dev)
        raw_actions = torch.empty((h, total, env.action_dim), device=dev)
        per_stock = self.setting.ppo_cfg.credit == "per_stock"
        log_probs = torch.empty((h, total, env.action_dim) if per_stock else (h, total), device=dev)
        credits = torch.empty((h, total, env.action_dim), device=dev) if per_stock else None
        rewards = torch.empty((h, total), device=dev)
        truncated = torch.empty((h, total), dtype=torch.bool, device=dev)
        final_values = torch.zeros((h, total), device=dev)
        noise = torch.zeros((len(group), layout.width, env.action_dim), device=dev)
        std = nets.log_std.exp().unsqueeze(1)
        states[0] = torch.cat([learner._state for learner in learners])
        for t in range(h):
            with profiler.operation("inference"):
                mean = nets.mean(layout.to_agents(states[t : t + 1]))
                for j, (learner, count) in enumerate(zip(learners, layout.counts)):
                    torch.randn((count, env.action_dim), generator=learner.generator, device=dev,
                                out=noise[j, :count])
                raw = mean + std * noise
                raw_actions[t] = layout.from_agents(raw, 1)[0]
                log_probs[t] = layout.from_agents(nets.log_prob(mean, raw, per_stock), 1)[0]
            with profiler.operation("simulation"):
                baseline = torch.tanh(layout.from_agents(mean, 1)[0]) if per_stock else None
                step = env.step(torch.tanh(raw_actions[t]), out=states[t + 1], baseline=baseline)
            rewards[t], truncated[t] = step.reward, step.truncated
            if credits is not None:
                credits[t] = step.credit
            if len(step.final.index):  # a shape, known on the host: no device sync
                with profiler.operation("inference"):
                    final_values[t].index_copy_(0, step.final.index, self._values_at(nets, layout, step.final))
        env.unstack([self.envs[i] for i in group])
        for learner, part in zip(learners, states[h].split(layout.counts)):
            learner._state = part.clone()
        with profiler.operation("advantage"):
            final_values = torch.where(truncated, final_values, 0.0)
            values = layout.from_agents(nets.value(layout.to_agents(states[:h])), h)
            next_value = layout.from_agents(nets.value(layout.to_agents(states[h : h + 1])), 1)[0]
            per_env = layout.agent_of_env
            gamma, lam = self._hparam("gamma", group=group)[per_env], self._hparam("gae_lambda", group=group)[per_env]
            adv = gae_advantages(rewards, values, next_value, truncated, final_values, gamma, lam)
        return Rollout(states[:h], raw_actions, log_probs, rewards, truncated, values,
                       adv if credits is None else credits, adv + values)

    @staticmethod
    def _values_at(nets: BatchedNets, layout: _Layout, final: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """Critic values of the final states of truncated episodes, each by its own agent."""
        index, states = final
        padded = torch.zeros((len(layout.sizes), layout.width, states.shape[1]), device=states.device)
        agent, local = layout.agent_of_env[index], layout.local_of_env[index]
        padded[agent, local] = states
        return nets.value(padded)[agent, local]

    def _update(self, group: Sequence[int], layout: _Layout, rollout: Rollout) -> None:
        """``repeat_times`` epochs of minibatch PPO updates per agent, as PPOLearner.update does,
        with each step batched over the agents that still have minibatches to go."""
        adv = rollout.advantages
        cfg, h, n = self.setting.ppo_cfg, adv.shape[0], len(group)
        with torch.no_grad():  # advantages normalised per agent (unbiased std, as Tensor.std)
            per_env = layout.agent_of_env
            actions = adv[0, 0].numel()  # 1, or n with per-stock credit
            count = (layout.sizes * h * actions).to(adv.dtype)

            def per_agent(x: torch.Tensor) -> torch.Tensor:  # [H, total(, n)] -> each agent's sum
                per_env_sums = x.sum(0).reshape(len(per_env), -1).sum(1)
                return torch.zeros(n, device=self.device).index_add_(0, per_env, per_env_sums)

            mean = per_agent(adv) / count
            shape = (-1,) + (1,) * (adv.dim() - 2)
            centred = adv - mean[per_env].reshape(shape)
            var = per_agent(centred.pow(2)) / (count - 1)
            adv = centred / (var.sqrt()[per_env].reshape(shape) + 1e-8)
        flat = [x.flatten(0, 1) for x in (rollout.states, rollout.raw_actions, rollout.log_probs, adv, rollout.returns)]
        size = [h * count for count in layout.counts]
        width = [min(cfg.batch_size, s) for s in size]
        batches = [s // w for s, w in zip(size, width)]
        steps = [int(self.learners[i].cfg.repeat_times) * b for i, b in zip(group, batches)]
        clip, entropy_coef = self._hparam("clip", group=group), self._hparam("entropy_coef", group=group)
        orders: list[torch.Tensor] = [torch.empty(0)] * n
        for s in range(max(steps)):
            active = [j for j in range(n) if s < steps[j]]
            rows = {}
            for j in active:
                if s % batches[j] == 0:  # a new epoch: a new permutation, drawn as PPOLearner draws it
                    perm = torch.randperm(size[j], generator=self.learners[group[j]].generator, device=self.device)
                    orders[j] = layout.samples(j, h)[perm]
                start = (s % batches[j]) * width[j]
                rows[j] = orders[j][start : start + width[j]]
            for part in self._by_width(group, active):
                with profiler.operation("backprop"):
                    self._gradient_step([group[j] for j in part], part, [rows[j] for j in part], flat, clip,
                                        entropy_coef)

    def _by_width(self, group: Sequence[int], active: list[int]) -> list[list[int]]:
        """``active`` in groups of similar width (grouped batched matmuls): a group's widest
        agent is at most ``WIDTH_SPREAD`` times its narrowest, so padding wastes little."""
        order = sorted(active, key=lambda j: self.nets.widths[group[j]][0])
        parts: list[list[int]] = []
        for j in order:
            if parts and self.nets.widths[group[j]][0] <= WIDTH_SPREAD * self.nets.widths[group[parts[-1][0]]][0]:
                parts[-1].append(j)
            else:
                parts.append([j])
        return [sorted(part) for part in parts]

    def _gradient_step(self, agents: list[int], active: list[int], rows: list[torch.Tensor], flat: list[torch.Tensor],
                       clip: torch.Tensor, entropy_coef: torch.Tensor) -> None:
        """One Adam step for ``agents`` (positions ``active`` in the update's group) on their
        minibatches ``rows``, computed on the model cut to them and their widths."""
        cfg = self.setting.ppo_cfg
        picked = torch.tensor(active, device=self.device)
        nets = self.nets.sub(agents, grad=True)
        longest = max(len(r) for r in rows)
        if all(len(r) == longest for r in rows):
            idx, weight = torch.stack(rows), torch.full((len(rows), longest), 1.0 / longest, device=self.device)
        else:  # an agent with fewer samples than batch_size: pad its rows, weigh them out
            idx = torch.stack([torch.cat((r, r[: longest - len(r)])) for r in rows])
            weight = torch.stack([(torch.arange(longest, device=self.device) < len(r)) / len(r) for r in rows])
        states, raw, old_log_probs, adv, returns = (x.index_select(0, idx.flatten()).unflatten(0, idx.shape)
                                                    for x in flat)
        mean = nets.mean(states)
        per_action = old_log_probs.dim() == raw.dim()
        ratio = (nets.log_prob(mean, raw, per_action) - old_log_probs).exp()
        c = clip[picked].reshape((-1,) + (1,) * (ratio.dim() - 1))
        policy_loss = -(clipped(ratio, adv, c, per_action) * weight).sum(1)
        value_loss = ((nets.value(states) - returns).pow(2) * weight).sum(1)
        loss = policy_loss + cfg.value_coef * value_loss - entropy_coef[picked] * nets.entropy()
        grads = torch.autograd.grad(loss.sum(), nets.params)
        self.adam.step(nets, grads, agents, cfg.max_grad_norm)

    def evaluate(self) -> list[float]:
        """Every agent's fitness on the validation window, in one pass of N accounts (§4.2)."""
        s = self.setting

        def policy(states: torch.Tensor) -> torch.Tensor:
            return torch.tanh(self.nets.mean(states.unsqueeze(1))).squeeze(1)

        curves = run_policies(policy, s.data, s.scales, s.env_cfg, s.val_window, accounts=len(self.learners))
        return [FITNESS[s.fitness](curves[:, i], s.per_year) for i in range(curves.shape[1])]

    def actor_state(self, i: int) -> dict[str, torch.Tensor]:
        """Agent ``i``'s actor weights (unpadded copies), e.g. for a snapshot."""
        actor = copy.deepcopy(self.learners[i].actor)
        self.nets.write_back(i, actor)
        return actor.state_dict()

    def finish(self) -> list[dict]:
        """Write the batched weights and Adam states back to the agents; their state dicts."""
        for i, learner in enumerate(self.learners):
            self.nets.write_back(i, learner.actor, learner.critic)
            groups = learner.optimizer.state_dict()["param_groups"]
            learner.optimizer.load_state_dict(self.adam.state_of(i, groups))
        return [agent.state_dict() for agent in self.agents]


def run_multiplexed(jobs: list[AgentJob], setting: Setting) -> list[AgentJob]:
    """Run a generation's jobs as one batched model: :func:`trainers.population.run_job`'s
    schedule (train, Nitro's rescaling, evaluate every ``eval_interval``, snapshots,
    patience, budgets) for all at once. A round's measured seconds are split over the
    agents in proportion to their env steps."""
    jobs = [fresh(job) for job in jobs]
    pop = Multiplexed(setting, jobs)
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
