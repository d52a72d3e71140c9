"""How many envs one static step can truncate, and where their final rows go
(trainers/common/env.py; docs/training.md, GPU workers).

A static env cannot ask the device how many envs a step truncated, so it lists a fixed
number of them, padded with the index E: for each of its parts (a stacked env's learners),
its **capacity** K, a bound on the count with a negligible chance of more, from the law of
the episodes alone (:func:`capacity`); :class:`FinalSlots` lays the list out. The env keeps
on the device by how many envs a part ever overflowed, and its owner checks that where it
reads the host anyway (:meth:`FinalSlots.check`).
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch

from trainers.config import EnvConfig

SPREAD = 8.0
"""Standard deviations of slack above the mean count."""
MARGIN = 16
"""Envs of slack on top, for small means (a Bernstein tail below 1e-10 per step either way)."""
HORIZON = 16
"""Steps of the renewal sequence computed, in longest episodes: its peaks come in the first few."""


def step_lengths(min_len: int, max_len: int, bars: int, every: int) -> torch.Tensor:
    """``f[k]``: the probability that an episode lasts ``k`` steps (``f[0] = 0``), float64.

    An episode starts at a bar uniform in ``[t_lo, t_hi)`` (so ``u = t_hi − start`` is uniform
    in ``[1, bars]``), runs ``L`` bars uniform in ``[min_len, max_len]``, is clamped at
    ``t_hi`` (``x = min(L, u)`` bars) and takes ``ceil(x / every)`` steps
    (:meth:`MarketEnv.draw_episodes`, :meth:`MarketEnv.step`). So
    ``P(x) = P(L > x) / bars + P(L = x) · (bars − x + 1) / bars`` for ``x`` in ``[1, bars]``.
    """
    x = torch.arange(1, min(max_len, bars) + 1, dtype=torch.float64)
    n = max_len - min_len + 1
    longer = (max_len - torch.clamp(x, min=min_len - 1)).clamp(min=0) / n
    equal = ((x >= min_len) & (x <= max_len)).to(torch.float64) / n
    p_bars = longer / bars + equal * (bars - x + 1) / bars
    steps = torch.ceil(x / every).long()
    return torch.zeros(int(steps[-1]) + 1, dtype=torch.float64).index_add_(0, steps, p_bars)


@lru_cache(maxsize=64)
def truncation_rate(min_len: int, max_len: int, bars: int, every: int) -> float:
    """The most probability that one env truncates at any one step: the peak of the renewal
    sequence ``u_s = Σ_k f[k] u_{s−k}``, ``u_0 = 1`` (a reset), of :func:`step_lengths`.

    Every reset draws a fresh episode independent of the past, so an env's truncations are a
    renewal process in steps, and ``u_s`` is the chance it truncates ``s`` steps after a reset,
    whatever happened in between. It tends to ``1 / E[steps]``, and its peaks, right after the
    reset that started every env at once, shrink as the lengths spread; it is computed for
    :data:`HORIZON` longest episodes and never taken below its limit. Fixed-length episodes
    keep it near 1: every env can end in the same step.
    """
    f = step_lengths(min_len, max_len, bars, every)
    longest = len(f) - 1
    mean_steps = float((f * torch.arange(len(f), dtype=torch.float64)).sum())
    horizon = HORIZON * longest
    u = torch.zeros(horizon + 1, dtype=torch.float64)
    u[0] = 1.0
    back = f[1:].flip(0)  # back[-k] = f[k]
    for s in range(1, horizon + 1):
        k = min(s, longest)
        u[s] = torch.dot(back[-k:], u[s - k : s])
    return min(1.0, max(float(u[1:].max()), 1.0 / mean_steps))


def capacity(cfg: EnvConfig, bars: int, num_envs: int) -> int:
    """K: how many of ``num_envs`` envs one step truncates, but for a negligible chance, on a
    window of ``bars`` start bars.

    The envs draw independently, so the count at a step is a sum of independent Bernoullis
    each at most ``p`` (:func:`truncation_rate`), below a binomial ``B(E, p)``; K is its mean +
    :data:`SPREAD` standard deviations + :data:`MARGIN`, capped at E. With fixed-length
    episodes ``p`` is near 1 (only the clamp at the window's end spreads them) and K is E,
    or near it on many thousands of envs: little gain, still exact. Stacked parts seeded alike
    would truncate together and break the independence: :meth:`FinalSlots.check` catches it.
    """
    p = truncation_rate(cfg.min_episode_len, cfg.episode_len, bars, cfg.decide_every)
    mean = num_envs * p
    bound = mean + SPREAD * math.sqrt(mean * (1.0 - p)) + MARGIN
    return min(num_envs, math.ceil(bound))


class FinalSlots:
    """Where a static step lists the envs it truncated: ``width`` slots per part of the env
    (a stacked env's parts, each one learner's envs; one part otherwise), the truncated envs
    of part ``p`` in order from slot ``p · width``, the rest padding (index E). The width is
    the largest part's :func:`capacity`, so a learner's final states are one row of a
    ``[parts, width]`` batch, valued by its own critic alone (trainers/ppo/ppo.py::advance).
    Built from host numbers once; :meth:`list` makes no host read."""

    def __init__(self, cfg: EnvConfig, bars: int, counts: list[int], device: torch.device,
                 resets: bool = True) -> None:
        self.counts = tuple(counts)
        self.capacities = tuple(capacity(cfg, bars, n) if resets else n for n in counts)
        self.width = max(self.capacities)
        sizes = torch.tensor(counts, device=device)
        self.part = torch.repeat_interleave(torch.arange(len(counts), device=device), sizes)
        """``[E]`` each env's part."""
        self.first = (torch.cumsum(sizes, 0) - sizes)[self.part]
        """``[E]`` its part's first env."""
        self.room = torch.tensor(self.capacities, device=device)[self.part]
        """``[E]`` its part's capacity."""
        self.envs = torch.arange(sum(counts), device=device)

    def list(self, truncated: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``[parts · width]`` env indices of the truncated envs by part (padding: E), and how
        many more envs than its capacity the fullest part truncated (0-dim; 0 when none)."""
        flags = truncated.long()
        before = torch.cumsum(flags, 0) - flags
        rank = before - before[self.first]  # truncated envs of its part before it
        over = torch.where(truncated, rank + 1 - self.room, 0).max()
        spare = len(self.counts) * self.width
        slot = torch.where(truncated & (rank < self.room), self.part * self.width + rank, spare)
        index = torch.full((spare + 1,), len(self.envs), dtype=torch.long, device=self.envs.device)
        index[slot] = self.envs  # the envs not listed all land on the spare slot, then dropped
        return index[:spare], over

    def check(self, over: int) -> None:
        """Raise if a step truncated ``over`` > 0 envs beyond a part's capacity: their final
        states were not listed, so their values would be wrong."""
        if over > 0:
            raise RuntimeError(
                f"a static env step truncated {over} more envs than a part's capacity {list(self.capacities)} "
                f"of {list(self.counts)} envs (trainers/common/truncation.py): their final states were lost. "
                "Stacked envs must draw independent episodes (distinct seeds)")


def place(base: torch.Tensor, index: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``base`` with ``rows[j]`` at row ``index[j]``, as a new tensor; entries whose index is
    ``len(base)`` (a static step's padding) are dropped. The rows go into a copy with one
    spare row that takes the padding, so no mask or host read is needed."""
    out = torch.cat([base, base[:1]])
    out[index] = rows
    return out[: len(base)]
