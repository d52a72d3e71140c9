"""The env's E accounts as one batch: stacked, pinned, resized and checkpointed.

:class:`trainers.common.env.MarketEnv` keeps each sub-environment's account (cash, shares,
value, clock) in per-env tensors, dim 0 the env. The MDP steps them (``env.py``); this module
holds what the trainers do to the batch around the MDP, none of which changes what a step
computes: stack the envs of a multiplexed population into one batch and hand the accounts
back (docs/training.md, multiplexing), keep them at fixed addresses for a CUDA graph
(``trainers/common/capture.py``), grow or shrink the batch (Nitro's actor scaling, nitro
§5.3), and save and restore it exactly for a checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

import torch

from trainers._checks import require
from trainers.common.draws import restore

if TYPE_CHECKING:
    from trainers.common.market import MarketData
    from trainers.common.state import StateScales
    from trainers.common.truncation import FinalSlots
    from trainers.config import EnvConfig

Batch = TypeVar("Batch", bound="AccountBatch")


class AccountBatch:
    """The batch operations of :class:`trainers.common.env.MarketEnv`, which supplies the
    data, window, random stream, slots and episode draws they read."""

    ACCOUNT = ("cash", "shares", "value", "t", "t_end")
    """The per-env state tensors (dim 0 is the env)."""

    data: MarketData
    scales: StateScales
    cfg: EnvConfig
    num_envs: int
    t_lo: int
    t_hi: int
    random_start: bool
    device: torch.device
    seed: int
    generator: torch.Generator
    cash: torch.Tensor
    shares: torch.Tensor
    value: torch.Tensor
    t: torch.Tensor
    t_end: torch.Tensor
    slots: FinalSlots
    static: bool
    streams: list[tuple[torch.Generator, int]]
    _all: torch.Tensor
    _home: dict[str, torch.Tensor] | None

    if TYPE_CHECKING:
        def __init__(self, data: MarketData, scales: StateScales, cfg: EnvConfig, num_envs: int,
                     window: tuple[int, int], *, random_start: bool = True) -> None: ...

        def _slots(self, counts: list[int]) -> FinalSlots: ...

        def _episodes(self) -> tuple[torch.Tensor, torch.Tensor]: ...

    @classmethod
    def stack(cls: type[Batch], envs: Sequence[Batch]) -> Batch:
        """One env stepping the accounts of ``envs`` as one batch (the multiplexed population).

        Each part keeps its own random stream, so the stacked env draws, steps and resets
        exactly what the parts would one by one; :meth:`unstack` hands the accounts back.
        """
        first = envs[0]
        _require_stackable(first, envs)
        env = cls(first.data, first.scales, first.cfg, sum(e.num_envs for e in envs), (first.t_lo, first.t_hi),
                  random_start=first.random_start)
        env.streams = [stream for e in envs for stream in e.streams]
        env.slots = env._slots([count for _, count in env.streams])
        env.static = first.static
        for name in cls.ACCOUNT:
            setattr(env, name, torch.cat([getattr(e, name) for e in envs]))
        return env

    def restack(self, envs: Sequence[AccountBatch]) -> None:
        """Take the accounts of ``envs`` (those this env was stacked from) again, into the
        tensors this env holds now, so a recorded step finds them where it left them."""
        for name in self.ACCOUNT:
            torch.cat([getattr(e, name) for e in envs], out=getattr(self, name))

    def rebind(self, envs: Sequence[AccountBatch]) -> None:
        """Stand for ``envs`` from now on, in place of those this env was stacked from (a new
        generation's, docs/training.md, what a generation keeps): their random streams now, their
        accounts at the next :meth:`restack`. They share this env's data, window and env counts."""
        _require_stackable(self, envs)
        require([e.num_envs for e in envs] == [count for _, count in self.streams],
                "a rebound stacked env keeps its parts' env counts")
        self.streams = [stream for e in envs for stream in e.streams]

    def unstack(self, envs: Sequence[AccountBatch]) -> None:
        """Write this stacked env's accounts back into the ``envs`` it was stacked from."""
        for name in self.ACCOUNT:
            for e, part in zip(envs, getattr(self, name).split([e.num_envs for e in envs])):
                setattr(e, name, part.clone())

    def pin(self) -> None:
        """Keep the accounts in fixed tensors from step to step: the first call remembers the
        tensors they are in, later calls copy the current values back into those. A step
        replayed from a CUDA graph reads and writes fixed addresses (trainers/common/capture.py)."""
        if self._home is None:
            self._home = {name: getattr(self, name) for name in self.ACCOUNT}
            return
        for name, home in self._home.items():
            now = getattr(self, name)
            if now is not home:
                home.copy_(now)
                setattr(self, name, home)

    def resize(self, num_envs: int) -> None:
        """Grow or shrink the batch to ``num_envs`` (Nitro's actor scaling, nitro §5.3): the
        first envs keep their accounts and episodes, new ones start fresh episodes."""
        require(num_envs >= 1 and len(self.streams) == 1, "resize needs >= 1 env and an unstacked env")
        keep = min(num_envs, self.num_envs)
        old = {name: getattr(self, name)[:keep] for name in self.ACCOUNT}
        self._set_size(num_envs)
        start, end = self._episodes()
        self.cash = torch.full((num_envs,), self.cfg.initial_cash, dtype=torch.float64, device=self.device)
        self.shares = torch.zeros((num_envs, self.data.n_stocks), dtype=torch.float64, device=self.device)
        self.value, self.t, self.t_end = self.cash.clone(), start, end
        for name, kept in old.items():
            getattr(self, name)[:keep] = kept

    def _set_size(self, num_envs: int) -> None:
        self.num_envs, self.streams = num_envs, [(self.generator, num_envs)]
        self._all = torch.arange(num_envs, device=self.device)
        self.slots = self._slots([num_envs])

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Accounts, clocks and the random stream: what a checkpoint needs to resume exactly."""
        return {"cash": self.cash, "shares": self.shares, "value": self.value, "t": self.t,
                "t_end": self.t_end, "rng": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        for name in self.ACCOUNT:
            setattr(self, name, state[name].to(self.device).clone())
        self._set_size(len(self.cash))  # Nitro may have resized the batch since it was built
        restore(self.generator, state["rng"], self.seed)


def _require_stackable(first: AccountBatch, envs: Sequence[AccountBatch]) -> None:
    require(all(e.data is first.data and e.scales == first.scales and e.cfg == first.cfg
                and (e.t_lo, e.t_hi, e.random_start) == (first.t_lo, first.t_hi, first.random_start)
                for e in envs), "stacked envs must share data, scales, config and window")
