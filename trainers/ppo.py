"""Proximal Policy Optimization (Schulman et al. 2017), written once: N learners trained as
one batched model, a single agent being a population of one.

It reads like CleanRL's ``ppo_continuous_action.py``: :meth:`PPO.collect` steps the envs for
``horizon`` steps into a rollout buffer that stays on the env's device (finrl-podracer.txt
§4.4) and computes GAE(λ), bootstrapping truncated episodes from their final state (the
end of data is a truncation, never a terminal state; docs/training.md); :meth:`PPO.update`
normalises the advantages and runs ``repeat_times`` epochs of minibatch steps on the
clipped surrogate, the value loss and the entropy bonus, each one Adam step after
gradient-norm clipping. Defaults follow finrl-podracer.txt Table 3.

Every learner keeps its own hyperparameters, envs and random streams, and draws them in
the order it would alone, so batching changes nothing but the kernels: a generation's
agents share one set of them (gmi-drl-gpu-multiplexing.txt §3), their weights padded into
:class:`~trainers.batched.BatchedNets` and their Adam states in
:class:`~trainers.batched.BatchedAdam`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import torch

from trainers import profiler
from trainers.agent import Learner
from trainers.batched import BatchedAdam, BatchedNets, Layout
from trainers.config import PPOConfig
from trainers.env import FinalStates, MarketEnv

WIDTH_SPREAD = 1.5
"""Learners whose first hidden layers differ by more than this factor update in separate batched matmuls."""


@dataclass
class Rollout:
    """Contiguous ``[H, E, ...]`` tensors of one rollout, on the env's device. With
    ``credit: per_stock``, ``logprobs`` and ``advantages`` (the env's credits) are per
    action, ``[H, E, n]``; ``returns`` are the GAE(λ) value targets either way."""

    obs: torch.Tensor
    actions: torch.Tensor
    """The pre-``tanh`` Gaussian samples; the env received their ``tanh``."""
    logprobs: torch.Tensor
    rewards: torch.Tensor
    truncated: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor

    def split(self, sizes: list[int]) -> list[Rollout]:
        """The rollouts of consecutive blocks of ``sizes`` envs (one block per learner)."""
        parts = [getattr(self, f.name).split(sizes, dim=1) for f in fields(self)]
        return [Rollout(*tensors) for tensors in zip(*parts)]


def gae_advantages(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_value: torch.Tensor,
    truncated: torch.Tensor,
    final_values: torch.Tensor,
    gamma: float | torch.Tensor,
    lam: float | torch.Tensor,
) -> torch.Tensor:
    """GAE(λ) advantages ``[H, E]`` (Schulman et al. 2016) with truncation bootstrapping.

    After a truncated step the env has already reset, so the TD target uses the value of
    the episode's final state (``final_values``) and the λ-recursion stops there.
    """
    advantages = torch.empty_like(rewards)
    gae = torch.zeros_like(next_value)
    for i in reversed(range(rewards.shape[0])):
        following = next_value if i == rewards.shape[0] - 1 else values[i + 1]
        bootstrap = torch.where(truncated[i], final_values[i], following)
        delta = rewards[i] + gamma * bootstrap - values[i]
        gae = delta + gamma * lam * gae * (~truncated[i])
        advantages[i] = gae
    return advantages


def clipped(ratio: torch.Tensor, advantages: torch.Tensor, clip: float | torch.Tensor,
            per_action: bool) -> torch.Tensor:
    """PPO's clipped surrogate ``min(ρA, clip(ρ, 1 − ε, 1 + ε)·A)`` per sample; with
    ``per_action`` the last dimension holds each action's term, and they are summed."""
    surr = torch.minimum(ratio * advantages, ratio.clamp(1 - clip, 1 + clip) * advantages)
    return surr.sum(-1) if per_action else surr


class PPO:
    """``learners`` and their ``envs`` as one batched model; :meth:`write_back` hands the
    trained weights and Adam moments back to the learners. ``cfg`` holds what they share
    (horizon, batch size, loss coefficients, credit); each learner's own ``cfg`` its
    evolved hyperparameters."""

    def __init__(self, learners: Sequence[Learner], envs: Sequence[MarketEnv], cfg: PPOConfig) -> None:
        self.learners, self.envs, self.cfg = list(learners), list(envs), cfg
        self.device = self.envs[0].device
        self.nets = BatchedNets.stack([lrn.actor for lrn in self.learners], [lrn.critic for lrn in self.learners])
        self.adam = BatchedAdam(self.nets, self.hparam("lr", torch.float64))
        for i, learner in enumerate(self.learners):
            self.adam.load_state_of(i, learner.optimizer)

    def hparam(self, name: str, dtype: torch.dtype = torch.float32,
               group: Sequence[int] | None = None) -> torch.Tensor:
        """Hyperparameter ``name`` of the learners in ``group`` (all by default) as a tensor."""
        group = range(len(self.learners)) if group is None else group
        values = [float(getattr(self.learners[i].cfg, name)) for i in group]
        return torch.tensor(values, dtype=dtype, device=self.device)

    def layout(self, group: Sequence[int]) -> Layout:
        """Where the envs of the learners in ``group`` sit in their stacked env and batches."""
        return Layout.of([self.envs[i].num_envs for i in group], self.device)

    def train_iteration(self, group: Sequence[int]) -> list[Rollout]:
        """One PPO iteration (rollout + update) of the learners in ``group``; the others rest,
        their envs and random streams untouched. Returns each one's part of the rollout."""
        rollout = self.collect(group)
        self.update(group, rollout)
        return rollout.split(self.layout(group).counts)

    @torch.no_grad()
    def collect(self, group: Sequence[int]) -> Rollout:
        """Step the envs of ``group`` for ``horizon`` steps and compute GAE(λ) per learner.
        The env writes each next state straight into the buffer."""
        layout, nets = self.layout(group), self.nets.sub(group)
        learners = [self.learners[i] for i in group]
        for learner, i in zip(learners, group):
            if learner.obs is None:
                learner.obs = self.envs[i].reset()
        env = MarketEnv.stack([self.envs[i] for i in group])
        h, total, dev = self.cfg.horizon, env.num_envs, self.device
        per_stock = self.cfg.credit == "per_stock"
        obs = torch.empty((h + 1, total, env.state_dim), device=dev)
        actions = torch.empty((h, total, env.action_dim), device=dev)
        logprobs = torch.empty((h, total, env.action_dim) if per_stock else (h, total), device=dev)
        credits = torch.empty((h, total, env.action_dim), device=dev) if per_stock else None
        rewards = torch.empty((h, total), device=dev)
        truncated = torch.empty((h, total), dtype=torch.bool, device=dev)
        final_values = torch.zeros((h, total), device=dev)
        noise = torch.zeros((len(group), layout.width, env.action_dim), device=dev)
        std = nets.log_std.exp().unsqueeze(1)
        obs[0] = torch.cat([learner.obs for learner in learners])
        for t in range(h):
            with profiler.operation("inference"):
                mean = nets.mean(layout.to_agents(obs[t : t + 1]))
                for j, (learner, count) in enumerate(zip(learners, layout.counts)):
                    torch.randn((count, env.action_dim), generator=learner.generator, device=dev,
                                out=noise[j, :count])
                action = mean + std * noise
                actions[t] = layout.from_agents(action, 1)[0]
                logprobs[t] = layout.from_agents(nets.log_prob(mean, action, per_stock), 1)[0]
            with profiler.operation("simulation"):
                baseline = torch.tanh(layout.from_agents(mean, 1)[0]) if per_stock else None
                step = env.step(torch.tanh(actions[t]), out=obs[t + 1], baseline=baseline)
            rewards[t], truncated[t] = step.reward, step.truncated
            if credits is not None:
                credits[t] = step.credit
            if len(step.final.index):  # a shape, known on the host: no device sync
                with profiler.operation("inference"):
                    final_values[t].index_copy_(0, step.final.index, _values_at(nets, layout, step.final))
        env.unstack([self.envs[i] for i in group])
        for learner, part in zip(learners, obs[h].split(layout.counts)):
            learner.obs = part.clone()
        with profiler.operation("advantage"):
            final_values = torch.where(truncated, final_values, 0.0)
            values = layout.from_agents(nets.value(layout.to_agents(obs[:h])), h)
            next_value = layout.from_agents(nets.value(layout.to_agents(obs[h : h + 1])), 1)[0]
            per_env = layout.agent_of_env
            gamma, lam = self.hparam("gamma", group=group)[per_env], self.hparam("gae_lambda", group=group)[per_env]
            advantages = gae_advantages(rewards, values, next_value, truncated, final_values, gamma, lam)
        return Rollout(obs[:h], actions, logprobs, rewards, truncated, values,
                       advantages if credits is None else credits, advantages + values)

    def update(self, group: Sequence[int], rollout: Rollout) -> None:
        """``repeat_times`` epochs of minibatch steps per learner on its normalised advantages,
        each step batched over the learners that still have minibatches to go."""
        layout, h, n = self.layout(group), rollout.rewards.shape[0], len(group)
        b_advantages = normalised(rollout.advantages, layout)
        b_obs, b_actions, b_logprobs, b_advantages, b_returns = (
            x.flatten(0, 1) for x in (rollout.obs, rollout.actions, rollout.logprobs, b_advantages, rollout.returns))
        batch = (b_obs, b_actions, b_logprobs, b_advantages, b_returns)
        size = [h * count for count in layout.counts]
        width = [min(self.cfg.batch_size, s) for s in size]
        minibatches = [s // w for s, w in zip(size, width)]
        steps = [int(self.learners[i].cfg.repeat_times) * b for i, b in zip(group, minibatches)]
        clip, entropy_coef = self.hparam("clip", group=group), self.hparam("entropy_coef", group=group)
        b_inds: list[torch.Tensor] = [torch.empty(0)] * n
        for s in range(max(steps)):
            active = [j for j in range(n) if s < steps[j]]
            mb_inds = {}
            for j in active:
                if s % minibatches[j] == 0:  # a new epoch: a new permutation of the learner's samples
                    perm = torch.randperm(size[j], generator=self.learners[group[j]].generator, device=self.device)
                    b_inds[j] = layout.samples(j, h)[perm]
                start = (s % minibatches[j]) * width[j]
                mb_inds[j] = b_inds[j][start : start + width[j]]
            for part in self.by_width(group, active):
                with profiler.operation("backprop"):
                    self.gradient_step([group[j] for j in part], part, [mb_inds[j] for j in part], batch, clip,
                                       entropy_coef)

    def gradient_step(self, learners: list[int], active: list[int], mb_inds: list[torch.Tensor],
                      batch: tuple[torch.Tensor, ...], clip: torch.Tensor, entropy_coef: torch.Tensor) -> None:
        """One Adam step for ``learners`` (positions ``active`` in the update's group) on their
        minibatches ``mb_inds``: the clipped surrogate plus ``value_coef`` × the value loss
        minus ``entropy_coef`` × the entropy, on the model cut to them and their widths."""
        picked = torch.tensor(active, device=self.device)
        nets = self.nets.sub(learners, grad=True)
        longest = max(len(r) for r in mb_inds)
        if all(len(r) == longest for r in mb_inds):
            idx, weight = torch.stack(mb_inds), torch.full((len(mb_inds), longest), 1.0 / longest, device=self.device)
        else:  # a learner with fewer samples than batch_size: pad its rows, weigh them out
            idx = torch.stack([torch.cat((r, r[: longest - len(r)])) for r in mb_inds])
            weight = torch.stack([(torch.arange(longest, device=self.device) < len(r)) / len(r) for r in mb_inds])
        mb_obs, mb_actions, mb_logprobs, mb_advantages, mb_returns = (
            x.index_select(0, idx.flatten()).unflatten(0, idx.shape) for x in batch)
        mean = nets.mean(mb_obs)
        per_action = mb_logprobs.dim() == mb_actions.dim()
        ratio = (nets.log_prob(mean, mb_actions, per_action) - mb_logprobs).exp()
        c = clip[picked].reshape((-1,) + (1,) * (ratio.dim() - 1))
        pg_loss = -(clipped(ratio, mb_advantages, c, per_action) * weight).sum(1)
        v_loss = ((nets.value(mb_obs) - mb_returns).pow(2) * weight).sum(1)
        loss = pg_loss + self.cfg.value_coef * v_loss - entropy_coef[picked] * nets.entropy()
        grads = torch.autograd.grad(loss.sum(), nets.params)
        self.adam.step(nets, grads, learners, self.cfg.max_grad_norm)

    def by_width(self, group: Sequence[int], active: list[int]) -> list[list[int]]:
        """``active`` in groups of similar width (grouped batched matmuls): a group's widest
        learner is at most ``WIDTH_SPREAD`` times its narrowest, so padding wastes little."""
        order = sorted(active, key=lambda j: self.nets.widths[group[j]][0])
        parts: list[list[int]] = []
        for j in order:
            if parts and self.nets.widths[group[j]][0] <= WIDTH_SPREAD * self.nets.widths[group[parts[-1][0]]][0]:
                parts[-1].append(j)
            else:
                parts.append([j])
        return [sorted(part) for part in parts]

    @torch.no_grad()
    def fuse(self, rows: Sequence[int]) -> None:
        """Average the actor and critic parameters over ``rows``, one agent's parallel learners
        (finrl-podracer.txt §4.4: learners exchange parameters, not gradients, once per epoch)."""
        index = torch.tensor(list(rows), device=self.device)
        for p in self.nets.params:
            p[index] = p.index_select(0, index).mean(dim=0, keepdim=True).expand(len(rows), *p.shape[1:])

    @torch.no_grad()
    def write_back(self) -> None:
        """Give every learner its trained weights and Adam moments."""
        for i, learner in enumerate(self.learners):
            self.nets.write_back(i, learner.actor, learner.critic)
            learner.optimizer = self.adam.state_of(i)


def normalised(advantages: torch.Tensor, layout: Layout) -> torch.Tensor:
    """Advantages ``[H, E(, n)]`` centred and scaled by each learner's own mean and unbiased
    standard deviation (as ``Tensor.std``) over its samples."""
    with torch.no_grad():
        h, n = advantages.shape[0], len(layout.counts)
        per_env = layout.agent_of_env
        count = (layout.sizes * h * advantages[0, 0].numel()).to(advantages.dtype)

        def per_learner(x: torch.Tensor) -> torch.Tensor:  # [H, E(, n)] -> each learner's sum
            per_env_sums = x.sum(0).reshape(len(per_env), -1).sum(1)
            return torch.zeros(n, device=x.device).index_add_(0, per_env, per_env_sums)

        mean = per_learner(advantages) / count
        shape = (-1,) + (1,) * (advantages.dim() - 2)
        centred = advantages - mean[per_env].reshape(shape)
        var = per_learner(centred.pow(2)) / (count - 1)
        return centred / (var.sqrt()[per_env].reshape(shape) + 1e-8)


def _values_at(nets: BatchedNets, layout: Layout, final: FinalStates) -> torch.Tensor:
    """Critic values of the final states of truncated episodes, each by its own learner."""
    index, states = final
    padded = torch.zeros((len(layout.sizes), layout.width, states.shape[1]), device=states.device)
    learner, local = layout.agent_of_env[index], layout.local_of_env[index]
    padded[learner, local] = states
    return nets.value(padded)[learner, local]
