"""Proximal Policy Optimization (Schulman et al. 2017), written once: N learners trained as
one batched model, a single agent being a population of one.

It reads like CleanRL's ``ppo_continuous_action.py``: :meth:`PPO.collect` steps the envs for
``horizon`` steps into a rollout buffer that stays on the env's device (finrl-podracer
§4.4) and computes GAE(λ), bootstrapping truncated episodes from their final state (the
end of data is a truncation, never a terminal state; docs/training.md); :meth:`PPO.update`
normalises the advantages and runs ``repeat_times`` epochs of minibatch steps on the
clipped surrogate, the value loss and the entropy bonus, each one Adam step after
gradient-norm clipping. Defaults follow finrl-podracer Table 3.

Every learner keeps its own hyperparameters, envs and random streams, and draws them in
the order it would alone, so batching changes nothing but the kernels: a generation's
agents share one set of them (gmi-drl §3), their weights padded into
:class:`~trainers.ppo.batched.BatchedNets` and their Adam states in
:class:`~trainers.ppo.batched.BatchedAdam`.

The hot loop never reads the device from the host (docs/training.md, GPU workers): a
rollout's noise and episodes are drawn before it (trainers/common/draws.py), its bookkeeping is
built once per group (trainers/ppo/schedule.py), and two update schedules share one loss and
one Adam step:

* **grouped** (the CPU's default): each gradient step trains the learners that still have
  minibatches, grouped by width and cut to it (no padded FLOPs);
* **static** (CUDA, or ``train.compile``): each gradient step trains the whole padded
  population with fixed shapes, and masks rest the learners that are done, so the steps can
  be recorded once and replayed, or compiled (trainers/common/capture.py).

Both give each learner the same minibatches in the same order, so they agree within float
rounding (tests/trainers/ppo/test_ppo.py::test_the_static_and_grouped_updates_agree).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import torch

from trainers import profiler
from trainers.common.capture import capturing, compiled
from trainers.common.draws import permutations
from trainers.common.env import FinalStates, MarketEnv
from trainers.common.truncation import place
from trainers.config import PPOConfig, RuntimeConfig
from trainers.ppo.agent import Learner
from trainers.ppo.averaging import WeightAverage
from trainers.ppo.batched import BatchedAdam, BatchedNets, Layout
from trainers.ppo.loss import gae_advantages, normalised, ppo_loss
from trainers.ppo.schedule import Group, Slot

WIDTH_SPREAD = 1.5
"""Learners whose first hidden layers differ by more than this factor update in separate batched matmuls."""


@dataclass
class Rollout:
    """Contiguous ``[H, E, ...]`` tensors of one rollout, on the env's device. With
    ``credit: per_stock``, ``logprobs`` and ``advantages`` (the env's credits) are per
    action, ``[H, E, n]``; ``returns`` are the GAE(λ) value targets either way. A group
    reuses its buffers: a rollout is valid until the next iteration of its group."""

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


def act(nets: BatchedNets, layout: Layout, slot: Slot, per_stock: bool) -> torch.Tensor | None:
    """The policy's part of a rollout step: sample every env's action from its learner's
    Gaussian with the step's drawn noise, record it and its log-probability in ``slot``;
    returns the baseline action (the mean's ``tanh``) with ``credit: per_stock``."""
    mean = nets.mean(layout.to_agents(slot.obs.unsqueeze(0)))
    action = mean + nets.log_std.exp().unsqueeze(1) * slot.noise
    slot.actions.copy_(layout.from_agents(action, 1)[0])
    slot.logprobs.copy_(layout.from_agents(nets.log_prob(mean, action, per_stock), 1)[0])
    return torch.tanh(layout.from_agents(mean, 1)[0]) if per_stock else None


def advance(env: MarketEnv, nets: BatchedNets, layout: Layout, slot: Slot, baseline: torch.Tensor | None) -> None:
    """The env's part of a rollout step: trade the recorded actions, write the next states
    into the buffer's next row and the critic's values of the episodes that ended there."""
    step = env.step(torch.tanh(slot.actions), out=slot.next_obs, baseline=baseline, episodes=(slot.starts, slot.ends))
    slot.rewards.copy_(step.reward)
    slot.truncated.copy_(step.truncated)
    if slot.credits is not None:
        assert step.credit is not None
        slot.credits.copy_(step.credit)
    if env.static:  # each learner's slots of final states, padded: value those, drop the padding
        assert env.slots.counts == tuple(layout.counts), "one part of the stacked env per learner"
        states = step.final.states.view(len(layout.counts), env.slots.width, -1)
        slot.final_values.copy_(place(torch.zeros_like(slot.final_values), step.final.index,
                                      nets.value(states).flatten()))
    elif len(step.final.index):  # a shape, known on the host
        slot.final_values.index_copy_(0, step.final.index, _values_at(nets, layout, step.final))


def rollout_step(env: MarketEnv, nets: BatchedNets, layout: Layout, slot: Slot, per_stock: bool) -> None:
    """One rollout step, policy then env: the unit ``train.compile: inductor`` compiles."""
    advance(env, nets, layout, slot, act(nets, layout, slot, per_stock))


class PPO:
    """``learners`` and their ``envs`` as one batched model; :meth:`write_back` hands the
    trained weights and Adam moments back to the learners. ``cfg`` holds what they share
    (horizon, batch size, loss coefficients, credit); each learner's own ``cfg`` its
    evolved hyperparameters. ``static`` picks the update schedule (default: static on CUDA
    or under ``runtime.compile``, grouped otherwise)."""

    def __init__(self, learners: Sequence[Learner], envs: Sequence[MarketEnv], cfg: PPOConfig,
                 runtime: RuntimeConfig = RuntimeConfig(), static: bool | None = None) -> None:
        self.learners, self.envs, self.cfg = list(learners), list(envs), cfg
        self.device = self.envs[0].device
        self.nets = BatchedNets.stack([lrn.actor for lrn in self.learners], [lrn.critic for lrn in self.learners])
        self.nets.fused = runtime.compile in ("inductor", "kernel")
        self.adam = BatchedAdam(self.nets, self.hparam("lr", torch.float64), self._anchor(),
                                self.hparam("anchor", torch.float64) if cfg.anchor else None)
        for i, learner in enumerate(self.learners):
            self.adam.load_state_of(i, learner.optimizer)
        self.static = (self.device.type != "cpu" or runtime.compile != "eager") if static is None else static
        self.recording = capturing(self.device, runtime.compile)
        self._rollout_step = compiled(rollout_step, runtime.compile)
        self._loss = compiled(ppo_loss, runtime.compile)
        if runtime.compile == "kernel":
            from trainers.ppo.kernel import kernel_loss  # imports Triton: only where it is asked for

            self._loss = kernel_loss(self.device, self._loss)
        self._everyone = list(range(len(self.learners)))
        self._hparams = {name: self.hparam(name) for name in ("clip", "entropy_coef")}
        self._indices: dict[tuple[int, ...], torch.Tensor] = {}
        self._groups: dict[tuple, Group] = {}
        self.average = self._average()
        """The learners' averaged actors (``ppo.average``), advanced by :meth:`advance_average`."""

    def _anchor(self) -> list[torch.Tensor] | None:
        """``ppo.anchor``: every learner's start, stacked as its weights are."""
        if not self.cfg.anchor:
            return None
        starts = [lrn.anchor for lrn in self.learners]
        if any(a is None for a in starts):
            raise ValueError("ppo.anchor > 0 but a learner has no start to be pulled towards")
        return BatchedNets.stack(starts, [lrn.critic for lrn in self.learners]).params  # type: ignore[arg-type]

    def _average(self) -> WeightAverage | None:
        return None if not self.cfg.average else WeightAverage(
            self.nets, [lrn.policy for lrn in self.learners], [lrn.critic for lrn in self.learners],
            [lrn.averaged for lrn in self.learners], self.cfg.average)

    @torch.no_grad()
    def reload(self, learners: Sequence[Learner], envs: Sequence[MarketEnv]) -> bool:
        """Take ``learners`` and their ``envs`` (the next generation's) in place of this PPO's,
        into the same tensors: weights, Adam states, hyperparameters, and the groups' buffers,
        stacked envs and recorded steps, which then serve them unchanged (docs/training.md, what
        a generation keeps). They train as a new PPO of them would, bit for bit. False, and
        nothing changed, when their networks' shapes or their market differ."""
        fresh = BatchedNets.stack([lrn.actor for lrn in learners], [lrn.critic for lrn in learners])
        if (len(learners) != len(self.learners) or fresh.widths != self.nets.widths
                or fresh.layout != self.nets.layout or envs[0].data is not self.envs[0].data
                or any(a.shape != b.shape for a, b in zip(fresh.params, self.nets.params))):
            return False
        self.learners, self.envs = list(learners), list(envs)
        for mine, new in zip(self.nets.params, fresh.params):
            mine.copy_(new)
        self.adam.lr.copy_(self.hparam("lr", torch.float64))
        if self.adam.anchor is not None and self.adam.strength is not None:
            for mine, new in zip(self.adam.anchor, self._anchor() or []):
                mine.copy_(new)
            self.adam.strength.copy_(self.hparam("anchor", torch.float64))
        for i, learner in enumerate(self.learners):
            self.adam.load_state_of(i, learner.optimizer)
        for name, held in self._hparams.items():
            held.copy_(self.hparam(name))
        self.average = self._average()
        for key, group in list(self._groups.items()):
            if key[1] == tuple(self.envs[i].num_envs for i in group.group):
                group.rebind()
            else:  # Nitro rescaled its envs: made again when needed
                group.drop()
                del self._groups[key]
        return True

    def hparam(self, name: str, dtype: torch.dtype = torch.float32,
               group: Sequence[int] | None = None) -> torch.Tensor:
        """Hyperparameter ``name`` of the learners in ``group`` (all by default) as a tensor."""
        group = range(len(self.learners)) if group is None else group
        values = [float(getattr(self.learners[i].cfg, name)) for i in group]
        return torch.tensor(values, dtype=dtype, device=self.device)

    def index(self, rows: Sequence[int]) -> torch.Tensor:
        """``rows`` as a tensor on the device, made once."""
        key = tuple(rows)
        if key not in self._indices:
            self._indices[key] = torch.tensor(key, dtype=torch.long, device=self.device)
        return self._indices[key]

    def group(self, group: Sequence[int]) -> Group:
        """The kept bookkeeping of ``group`` (made on its first iteration, and again when
        Nitro rescales an env count)."""
        key = (tuple(group), tuple(self.envs[i].num_envs for i in group))
        if key not in self._groups:
            self._groups[key] = Group(self, list(group))
        return self._groups[key]

    def layout(self, group: Sequence[int]) -> Layout:
        """Where the envs of the learners in ``group`` sit in their stacked env and batches."""
        return self.group(group).schedule.layout

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
        g = self.group(group)
        learners = [self.learners[i] for i in group]
        for learner, i in zip(learners, group):
            if learner.obs is None:
                learner.obs = self.envs[i].reset()
        buf = g.load(learners, [self.envs[i] for i in group])
        g.rollout()
        g.env.unstack([self.envs[i] for i in group])
        for learner, part in zip(learners, buf.obs[self.cfg.horizon].split(g.schedule.layout.counts)):
            learner.obs = part.clone()
        h = self.cfg.horizon
        assert buf.values is not None and buf.advantages is not None and buf.returns is not None
        return Rollout(buf.obs[:h], buf.actions, buf.logprobs, buf.rewards, buf.truncated, buf.values,
                       buf.advantages, buf.returns)

    def rollout(self, g: Group) -> None:
        """The rollout proper, from drawn noise to advantages, on the group's buffers: what a
        recorded rollout replays."""
        buf, layout, h = g.buf, g.schedule.layout, self.cfg.horizon
        per_stock = self.cfg.credit == "per_stock"
        for t in range(h):
            slot = buf.at(t)
            if self._rollout_step is rollout_step:
                with profiler.operation("inference"):
                    baseline = act(g.nets, layout, slot, per_stock)
                with profiler.operation("simulation"):
                    advance(g.env, g.nets, layout, slot, baseline)
            else:
                self._rollout_step(g.env, g.nets, layout, slot, per_stock)
        with profiler.operation("advantage"):
            final_values = torch.where(buf.truncated, buf.final_values, 0.0)
            values = layout.from_agents(g.nets.value(layout.to_agents(buf.obs[:h])), h)
            next_value = layout.from_agents(g.nets.value(layout.to_agents(buf.obs[h : h + 1])), 1)[0]
            advantages = gae_advantages(buf.rewards, values, next_value, buf.truncated, final_values,
                                        g.schedule.gamma, g.schedule.lam)
            g.keep(values=values, advantages=advantages if buf.credits is None else buf.credits,
                   returns=advantages + values)
            assert buf.advantages is not None
            g.keep(normalised=normalised(buf.advantages, layout))
        if self.recording:
            g.env.pin()

    def samples(self, group: Sequence[int], rollout: Rollout) -> tuple[torch.Tensor, ...]:
        """The update's samples from ``group``'s latest rollout, a row each: state, actions, old
        log-probabilities, normalised advantages and value target."""
        buf = self.group(group).buf
        assert rollout.advantages is buf.advantages and buf.normalised is not None, "not the group's latest rollout"
        return tuple(x.flatten(0, 1) for x in (rollout.obs, rollout.actions, rollout.logprobs, buf.normalised,
                                               rollout.returns))

    def update(self, group: Sequence[int], rollout: Rollout) -> None:
        """``repeat_times`` epochs of minibatch steps per learner on its normalised advantages:
        the static schedule (every learner every step, masked) or the grouped one (the
        learners with minibatches to go, by width)."""
        g = self.group(group)
        schedule = g.schedule
        batch = self.samples(group, rollout)
        perms = [permutations(self.learners[i].generator, schedule.repeat_times[j], schedule.sizes[j], self.device)
                 for j, i in enumerate(group)]
        table = schedule.table(perms)
        if self.static:
            g.batch = batch
            weight, active = schedule.static_masks()
            for s in range(table.shape[0]):
                g.minibatch(table[s], weight[s], active[s])
                with profiler.operation("backprop"):
                    g.gradient()
            return
        clip, entropy_coef = self.hparam("clip", group=group), self.hparam("entropy_coef", group=group)
        n = len(group)
        for s in range(max(schedule.steps)):
            active = [j for j in range(n) if s < schedule.steps[j]]
            mb_inds = {j: table[s, group[j], : schedule.widths[j]] for j in active}
            for part in self.by_width(group, active):
                with profiler.operation("backprop"):
                    self.gradient_step([group[j] for j in part], part, [mb_inds[j] for j in part], batch, clip,
                                       entropy_coef)

    def gradient_step(self, learners: list[int], active: list[int], mb_inds: list[torch.Tensor],
                      batch: tuple[torch.Tensor, ...], clip: torch.Tensor, entropy_coef: torch.Tensor) -> None:
        """One Adam step for ``learners`` (positions ``active`` in the update's group) on their
        minibatches ``mb_inds``, on the model cut to them and their widths (the grouped schedule)."""
        picked = self.index(active)
        nets = self.nets.sub(learners, grad=True)
        longest = max(len(r) for r in mb_inds)
        if all(len(r) == longest for r in mb_inds):
            idx, weight = torch.stack(mb_inds), torch.full((len(mb_inds), longest), 1.0 / longest, device=self.device)
        else:  # a learner with fewer samples than batch_size: pad its rows, weigh them out
            idx = torch.stack([r[torch.arange(longest, device=self.device) % len(r)] for r in mb_inds])
            weight = torch.stack([(torch.arange(longest, device=self.device) < len(r)) / len(r) for r in mb_inds])
        loss = self._loss(nets, batch, idx, weight, clip[picked], entropy_coef[picked], self.cfg.value_coef)
        grads = torch.autograd.grad(loss, nets.params)
        self.adam.step(nets, grads, learners, self.cfg.max_grad_norm, rows=self.index(learners))

    def static_step(self, batch: tuple[torch.Tensor, ...], idx: torch.Tensor, weight: torch.Tensor,
                    active: torch.Tensor) -> None:
        """One Adam step of the whole padded population on minibatches ``idx`` ``[N, B]``
        weighted by ``weight``; learners not ``active`` are left exactly as they were."""
        nets = self.nets.sub(self._everyone, grad=True)  # the parameters themselves, as leaves
        loss = self._loss(nets, batch, idx, weight, self._hparams["clip"], self._hparams["entropy_coef"],
                          self.cfg.value_coef)
        grads = torch.autograd.grad(loss, nets.params)
        self.adam.step(nets, grads, self._everyone, self.cfg.max_grad_norm, rows=self.index(self._everyone),
                       active=active)

    def advance_average(self, rows: Sequence[int]) -> None:
        """Fold the learners ``rows``' current weights into their averages (after an iteration,
        and after its fusion, so an agent's learners keep one average)."""
        if self.average is not None:
            self.average.advance(self.index(rows))

    def policy_nets(self) -> BatchedNets:
        """The model whose actors are the learners' policies: averaged with ``ppo.average``."""
        return self.nets if self.average is None else self.average.policy()

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
        (finrl-podracer §4.4: learners exchange parameters, not gradients, once per epoch)."""
        index = self.index(rows)
        for p in self.nets.params:
            p[index] = p.index_select(0, index).mean(dim=0, keepdim=True).expand(len(rows), *p.shape[1:])

    def release(self) -> None:
        """Drop the groups' buffers and recorded steps now: a CUDA graph keeps its memory pool
        while it lives, and a group and its recorded steps refer to each other, which only a
        garbage collection would undo."""
        for group in self._groups.values():
            group.drop()
        self._groups.clear()

    def check_capacity(self) -> None:
        """Raise if a static rollout step truncated more envs than its stacked env lists
        (:meth:`MarketEnv.check_capacity`); reads the device, so the callers are those that
        read it anyway: :meth:`write_back` and the population's evaluation."""
        for group in self._groups.values():
            group.env.check_capacity()

    @torch.no_grad()
    def write_back(self) -> None:
        """Give every learner its trained weights and Adam moments (after
        :meth:`check_capacity`)."""
        self.check_capacity()
        for i, learner in enumerate(self.learners):
            self.nets.write_back(i, learner.actor, learner.critic)
            learner.optimizer = self.adam.state_of(i)
            if self.average is not None:
                learner.average, learner.averaged = self.average.actor(i, learner.actor), int(self.average.counts[i])


def _values_at(nets: BatchedNets, layout: Layout, final: FinalStates) -> torch.Tensor:
    """Critic values of the final states of truncated episodes, each by its own learner."""
    index, states = final
    padded = torch.zeros((len(layout.sizes), layout.width, states.shape[1]), device=states.device)
    learner, local = layout.agent_of_env[index], layout.local_of_env[index]
    padded[learner, local] = states
    return nets.value(padded)[learner, local]
