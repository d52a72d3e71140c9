"""How many envs one static step can truncate, and where their final rows go
(trainers/common/env.py; docs/training.md, GPU workers).

A static env cannot ask the device how many envs a step truncated, so it lists a fixed
number, its **capacity** K, padded with the index E. K is a bound on the count with a
negligible chance of more, from the law of the episodes alone (:func:`capacity`); the
env counts the most truncations it has seen on the device, and its owner checks them
where it reads the host anyway (:func:`check_capacity`).
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
    would truncate together and break the independence: :func:`check_capacity` catches it.
    """
    p = truncation_rate(cfg.min_episode_len, cfg.episode_len, bars, cfg.decide_every)
    mean = num_envs * p
    bound = mean + SPREAD * math.sqrt(mean * (1.0 - p)) + MARGIN
    return min(num_envs, math.ceil(bound))


def check_capacity(most: int, capacity: int, num_envs: int) -> None:
    """Raise if ``most`` envs truncated in one step of an env of ``capacity``: a static step
    kept the final states of only ``capacity`` of them, so the others' values are wrong."""
    if most > capacity:
        raise RuntimeError(
            f"a static env step truncated {most} of {num_envs} envs, more than its capacity of {capacity} "
            "(trainers/common/truncation.py): the other final states were lost. Stacked envs must draw "
            "independent episodes (distinct seeds); else set env.capacity = env.num_envs")


def place(base: torch.Tensor, index: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``base`` with ``rows[j]`` at row ``index[j]``, as a new tensor; entries whose index is
    ``len(base)`` (a static step's padding) are dropped. The rows go into a copy with one
    spare row that takes the padding, so no mask or host read is needed."""
    out = torch.cat([base, base[:1]])
    out[index] = rows
    return out[: len(base)]
