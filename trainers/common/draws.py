"""Random draws made up front, and random streams that travel between devices
(docs/training.md, GPU workers).

A rollout's Gaussian action noise and episode starts, and an update's minibatch
permutations, are drawn before the loop that uses them, as whole tensors, so the loop
itself never touches a generator and can be recorded once and replayed (trainers/common/capture.py).
Each agent keeps its own generators, so how many agents share a batch never changes what
any of them draws.

* On a CPU generator a draw for ``steps`` steps is made step after step, in the order a
  step-by-step loop draws: a CPU run is bit for bit what it was when each step drew for
  itself.
* On a CUDA generator it is one call per stream (Philox numbers differ from the CPU's
  Mersenne twister anyway).
* ``train.rng: cpu`` keeps the generators on the CPU for a CUDA run, which then draws the
  very numbers a CPU run draws: the way to check a GPU against the CPU.

A generator's state is a CPU byte tensor on every device. A checkpoint resumed on another
kind of device cannot continue the stream it saved (a Mersenne-twister state does not fit
Philox), so :func:`restore` restarts that stream from its seed and says so.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

Draw = Callable[[tuple[int, ...]], tuple[torch.Tensor, ...]]
"""Draws tensors shaped ``(*lead, ...)`` from one generator; ``lead`` is ``()`` for one step."""


def draw_on(generator: torch.Generator, steps: int, draw: Draw, device: torch.device) -> tuple[torch.Tensor, ...]:
    """``steps`` steps of ``draw``, as tensors ``[steps, ...]`` on ``device``: one call per step
    on a CPU generator (the order a step-by-step loop draws in), one call on any other."""
    if generator.device.type == "cpu":
        parts = tuple(torch.stack(drawn) for drawn in zip(*(draw(()) for _ in range(steps))))
    else:
        parts = draw((steps,))
    return tuple(to_device(part, device) for part in parts)


def permutations(generator: torch.Generator, count: int, size: int, device: torch.device) -> torch.Tensor:
    """``[count, size]``: ``count`` permutations of ``range(size)`` drawn one after another
    (an update's epochs), on ``device``."""
    perms = [torch.randperm(size, generator=generator, device=generator.device) for _ in range(count)]
    return to_device(torch.stack(perms) if perms else torch.empty((0, size), dtype=torch.long), device)


def to_device(x: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``x`` on ``device``; from the CPU to CUDA through pinned memory, so the copy does not
    wait for the device's queue (a copy from pageable memory would)."""
    if x.device == device:
        return x
    if device.type == "cuda" and x.device.type == "cpu":
        return x.pin_memory().to(device, non_blocking=True)
    return x.to(device)


def restore(generator: torch.Generator, state: torch.Tensor, seed: int) -> None:
    """Set ``generator`` to a saved ``state``. A state saved by a generator of another kind
    (a CUDA run resumed on the CPU, or back) does not fit it: the stream then restarts from
    ``seed``, with a warning, and the run goes on from the saved weights and accounts."""
    try:
        generator.set_state(state.cpu())
    except RuntimeError:
        warnings.warn(f"a random stream saved on another kind of device restarts from its seed on "
                      f"{generator.device.type} (docs/training.md, GPU workers)", stacklevel=2)
        generator.manual_seed(seed)
