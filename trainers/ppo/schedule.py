"""What a PPO iteration of a group of learners keeps from one iteration to the next
(trainers/ppo/ppo.py; docs/training.md, GPU workers): where their envs sit in the batch, their
hyperparameters as device tensors, which samples every gradient step of the update takes,
and, when steps are recorded, the buffers a recorded step reads and writes.

Everything here is built once per group, from host numbers, outside the hot loop: a step
then only indexes device tensors, so it reads nothing back to the host and builds nothing
from host data.

The **minibatch schedule** is CleanRL's: each of a learner's ``repeat_times`` epochs is a
fresh permutation of its ``horizon × num_envs`` samples, cut into ``size // batch_size``
minibatches of ``batch_size`` (all its samples, when fewer); step ``s`` takes epoch
``s // minibatches``'s minibatch ``s % minibatches``. Learners with fewer steps rest for
the rest of the update. :meth:`Schedule.table` lays every step's minibatch out as one
``[steps, N, width]`` index tensor, padded with the learner's own samples, beside fixed
``weight`` and ``active`` tables, so the static update runs every learner at every step
with fixed shapes and lets the masks do the resting.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from trainers.common.capture import Recorded
from trainers.common.draws import draw_on
from trainers.common.env import MarketEnv
from trainers.config import PPOConfig
from trainers.ppo.agent import Learner
from trainers.ppo.batched import BatchedNets, Layout


@dataclass
class Slot:
    """Views of one step's rows of :class:`Buffers`."""

    obs: torch.Tensor
    next_obs: torch.Tensor
    noise: torch.Tensor
    starts: torch.Tensor
    ends: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    rewards: torch.Tensor
    truncated: torch.Tensor
    final_values: torch.Tensor
    credits: torch.Tensor | None


@dataclass
class Buffers:
    """One rollout's ``[H, E, ...]`` tensors on the env's device (``obs`` has ``H + 1`` rows)."""

    obs: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    """``[H, E]``, or ``[H, E, n]`` per action with ``credit: per_stock``."""
    rewards: torch.Tensor
    truncated: torch.Tensor
    final_values: torch.Tensor
    """The critic's value of each truncated episode's final state (0 elsewhere)."""
    credits: torch.Tensor | None
    noise: torch.Tensor
    """``[H, N, M, A]`` the Gaussian draws of the actions (padded slots 0)."""
    starts: torch.Tensor
    ends: torch.Tensor
    """``[H, E]`` each step's drawn episode (start, end) bars, for the envs that reset there."""
    values: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    normalised: torch.Tensor | None = None
    """The advantages centred and scaled per learner, as the update takes them."""

    def at(self, t: int) -> Slot:
        """Step ``t``'s rows: what the step reads and where it writes."""
        return Slot(self.obs[t], self.obs[t + 1], self.noise[t], self.starts[t], self.ends[t], self.actions[t],
                    self.logprobs[t], self.rewards[t], self.truncated[t], self.final_values[t],
                    None if self.credits is None else self.credits[t])

    @classmethod
    def empty(cls, h: int, env: MarketEnv, agents: int, width: int, per_stock: bool) -> Buffers:
        dev, total, n = env.device, env.num_envs, env.action_dim
        return cls(
            obs=torch.empty((h + 1, total, env.state_dim), device=dev),
            actions=torch.empty((h, total, n), device=dev),
            logprobs=torch.empty((h, total, n) if per_stock else (h, total), device=dev),
            rewards=torch.empty((h, total), device=dev),
            truncated=torch.empty((h, total), dtype=torch.bool, device=dev),
            final_values=torch.zeros((h, total), device=dev),
            credits=torch.empty((h, total, n), device=dev) if per_stock else None,
            noise=torch.zeros((h, agents, width, n), device=dev),
            starts=torch.empty((h, total), dtype=torch.long, device=dev),
            ends=torch.empty((h, total), dtype=torch.long, device=dev))


@dataclass
class Schedule:
    """A group's iteration plan: ``group`` are rows of the batched model (N in all), their
    envs ``counts``; ``cfg`` the PPO base (horizon, batch size)."""

    group: list[int]
    rows: int
    layout: Layout
    horizon: int
    repeat_times: list[int]
    batch_size: int
    gamma: torch.Tensor
    """``[E]`` each env's learner's γ."""
    lam: torch.Tensor
    """``[E]`` each env's learner's GAE λ."""
    _samples: dict[int, torch.Tensor] = field(default_factory=dict, repr=False)
    _static: tuple[torch.Tensor, torch.Tensor] | None = field(default=None, repr=False)

    @classmethod
    def of(cls, group: Sequence[int], rows: int, counts: Sequence[int], cfg: PPOConfig,
           learner_cfgs: Sequence[PPOConfig], device: torch.device) -> Schedule:
        layout = Layout.of(counts, device)
        repeat_times, gamma, lam = _tuning(layout, learner_cfgs)
        return cls(list(group), rows, layout, cfg.horizon, repeat_times, cfg.batch_size, gamma, lam)

    def retune(self, learner_cfgs: Sequence[PPOConfig]) -> None:
        """Take new learners' epochs, γ and λ (for the same envs); γ and λ into the tensors that
        a recorded rollout reads."""
        self.repeat_times, gamma, lam = _tuning(self.layout, learner_cfgs)
        self.gamma.copy_(gamma)
        self.lam.copy_(lam)
        self._static = None

    @property
    def sizes(self) -> list[int]:
        """Samples per learner of the group."""
        return [self.horizon * count for count in self.layout.counts]

    @property
    def widths(self) -> list[int]:
        """Minibatch size per learner: ``batch_size``, or all its samples when fewer."""
        return [min(self.batch_size, s) for s in self.sizes]

    @property
    def minibatches(self) -> list[int]:
        return [s // w for s, w in zip(self.sizes, self.widths)]

    @property
    def steps(self) -> list[int]:
        """Gradient steps per learner in one update."""
        return [r * b for r, b in zip(self.repeat_times, self.minibatches)]

    def samples(self, j: int) -> torch.Tensor:
        """Flat rollout rows of the group's learner ``j``, numbered as it would alone (t·E_j + e)."""
        if j not in self._samples:
            self._samples[j] = self.layout.samples(j, self.horizon)
        return self._samples[j]

    def table(self, perms: Sequence[torch.Tensor]) -> torch.Tensor:
        """``[steps, N, width]`` the rollout rows of every row's minibatch at every step, from
        each learner's epoch permutations ``perms[j]`` (``[repeat_times, size]``). A shorter
        minibatch repeats its own rows to the width; rows outside the group, and steps past
        a learner's last, hold row 0 (inactive: :meth:`static_masks` weighs them out)."""
        width, device = max(self.widths), self.layout.sizes.device
        table = torch.zeros((max(self.steps), self.rows, width), dtype=torch.long, device=device)
        for j, row in enumerate(self.group):
            w, b = self.widths[j], self.minibatches[j]
            chosen = self.samples(j)[perms[j]][:, : b * w].reshape(-1, w)  # epoch-major, as step s takes them
            table[: self.steps[j], row] = chosen[:, torch.arange(width, device=device) % w]
        return table

    def static_masks(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``weight`` ``[steps, N, width]`` (1 / the learner's minibatch size on its real rows,
        0 on padding, rows outside the group and rested steps) and ``active`` ``[steps, N]``
        bool: fixed for the group, built once."""
        if self._static is None:
            device, width = self.layout.sizes.device, max(self.widths)
            weight = torch.zeros((max(self.steps), self.rows, width), device=device)
            active = torch.zeros((max(self.steps), self.rows), dtype=torch.bool, device=device)
            for j, row in enumerate(self.group):
                w, steps = self.widths[j], self.steps[j]
                weight[:steps, row] = (torch.arange(width, device=device) < w) / w
                active[:steps, row] = True
            self._static = (weight, active)
        return self._static


def _tuning(layout: Layout, learner_cfgs: Sequence[PPOConfig]) -> tuple[list[int], torch.Tensor, torch.Tensor]:
    """Each learner's epochs, and each env's learner's γ and λ on the layout's device."""
    per_env, device = layout.agent_of_env, layout.sizes.device
    gamma = torch.tensor([c.gamma for c in learner_cfgs], dtype=torch.float32, device=device)[per_env]
    lam = torch.tensor([c.gae_lambda for c in learner_cfgs], dtype=torch.float32, device=device)[per_env]
    return [int(c.repeat_times) for c in learner_cfgs], gamma, lam


class Trainer(Protocol):
    """What a :class:`Group` needs of its PPO (trainers/ppo/ppo.py)."""

    learners: list[Learner]
    envs: list[MarketEnv]
    cfg: PPOConfig
    device: torch.device
    nets: BatchedNets
    static: bool
    recording: bool

    def index(self, rows: Sequence[int]) -> torch.Tensor: ...

    def rollout(self, group: Group) -> None: ...

    def static_step(self, batch: tuple[torch.Tensor, ...], idx: torch.Tensor, weight: torch.Tensor,
                    active: torch.Tensor) -> None: ...


class Group:
    """What a PPO (:class:`Trainer`) keeps for one group of learners between iterations: the
    schedule, the stacked env, the model cut to the group, the buffers, and the recorded steps."""

    def __init__(self, ppo: Trainer, group: list[int]) -> None:
        self.ppo, self.group = ppo, group
        envs = [ppo.envs[i] for i in group]
        self.schedule = Schedule.of(group, len(ppo.learners), [e.num_envs for e in envs], ppo.cfg,
                                    [ppo.learners[i].cfg for i in group], ppo.device)
        self.env = MarketEnv.stack(envs)
        self.env.static = ppo.static
        self.whole = ppo.nets.whole(group)
        self.nets = ppo.nets.sub(group)
        self.buf: Buffers = self._buffers()
        self.batch: tuple[torch.Tensor, ...] = ()
        self._minibatch: tuple[torch.Tensor, ...] | None = None
        self._rollout = Recorded(lambda: ppo.rollout(self), ppo.recording)
        self._gradient = Recorded(self._static_step, ppo.recording)
        if ppo.recording:
            self.env.pin()

    def _buffers(self) -> Buffers:
        layout = self.schedule.layout
        return Buffers.empty(self.ppo.cfg.horizon, self.env, len(layout.counts), layout.width,
                             self.ppo.cfg.credit == "per_stock")

    def load(self, learners: Sequence[Learner], envs: Sequence[MarketEnv]) -> Buffers:
        """Take the learners' accounts and states, and draw the rollout's noise and episodes
        into the group's buffers (the same tensors every iteration: a stale final value is
        masked by its step's truncation flag, and padded noise slots are never written)."""
        ppo, h, layout = self.ppo, self.ppo.cfg.horizon, self.schedule.layout
        self.env.restack(envs)
        self.refresh_nets()
        buf = self.buf
        torch.cat([learner.obs for learner in learners], out=buf.obs[0])
        for j, (learner, count) in enumerate(zip(learners, layout.counts)):
            (noise,) = draw_on(learner.generator, h, lambda lead, g=learner.generator, c=count: (
                torch.randn((*lead, c, buf.noise.shape[-1]), generator=g, device=g.device),), ppo.device)
            buf.noise[:, j, :count] = noise
        starts, ends = self.env.draw_episodes(h)
        buf.starts.copy_(starts)
        buf.ends.copy_(ends)
        return buf

    def rebind(self) -> None:
        """Serve the PPO's new learners (:meth:`trainers.ppo.ppo.PPO.reload`), whose envs have
        the group's env counts: their random streams, epochs, γ and λ, in the tensors the
        recorded steps read; the buffers, the stacked env's accounts and the steps stay."""
        ppo = self.ppo
        self.schedule.retune([ppo.learners[i].cfg for i in self.group])
        self.env.rebind([ppo.envs[i] for i in self.group])

    def rollout(self) -> None:
        self._rollout()

    def drop(self) -> None:
        """Let go of the recorded steps (and so of their graphs' memory)."""
        self._rollout = self._gradient = Recorded(lambda: None, False)

    def refresh_nets(self) -> None:
        """The rollout's model: the batched parameters themselves for the whole population; a
        cut copy for a part of it (into the same tensors, when steps are recorded)."""
        if self.whole:
            return
        fresh = self.ppo.nets.sub(self.group, rows=self.ppo.index(self.group))
        if self.ppo.recording:
            for mine, new in zip(self.nets.params, fresh.params):
                mine.copy_(new)
        else:
            self.nets = fresh

    def keep(self, **tensors: torch.Tensor) -> None:
        """Store rollout results in the buffers (into the same tensors when steps are recorded)."""
        for name, value in tensors.items():
            held = getattr(self.buf, name)
            if self.ppo.recording and held is not None:
                held.copy_(value)
            else:
                setattr(self.buf, name, value.clone() if self.ppo.recording else value)

    def minibatch(self, idx: torch.Tensor, weight: torch.Tensor, active: torch.Tensor) -> None:
        """The next static gradient step's minibatch (copied into fixed tensors when recorded)."""
        if self.ppo.recording and self._minibatch is not None:
            for held, new in zip(self._minibatch, (idx, weight, active)):
                held.copy_(new)
        else:
            self._minibatch = (idx.clone(), weight.clone(), active.clone()) if self.ppo.recording else (
                idx, weight, active)

    def gradient(self) -> None:
        self._gradient()

    def _static_step(self) -> None:
        assert self._minibatch is not None
        self.ppo.static_step(self.batch, *self._minibatch)
