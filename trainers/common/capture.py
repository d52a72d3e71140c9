"""Captured steps (``train.compile``; docs/training.md, GPU workers).

A training step on a GPU issues a few hundred small kernels; launched one by one from
Python, the GPU waits on the launches. Two remedies, which ``train.compile`` chooses:

* ``graphs``: :class:`Recorded` records a step once as a CUDA graph and replays it, one
  launch for the whole step (the PyTorch "CUDA graphs" whole-network capture pattern: warm
  up on a side stream, capture, replay);
* ``inductor``: :func:`compiled` passes the step's body to ``torch.compile``, which fuses
  its elementwise chains into a few kernels (fewer bytes moved), and on CUDA the step is
  then recorded and replayed as well (what ``mode="reduce-overhead"`` does, kept in hand here).

A recorded step must read and write only tensors that stay where they are from call to
call (static buffers, :meth:`trainers.common.accounts.AccountBatch.pin`), take no host decision from
device values (trainers/common/draws.py draws its randomness before it), and keep its shapes.
:func:`no_host_reads` checks the second on any device: it fails a block that reads device
memory on the host or builds a tensor from host data. On a GPU either one stalls the step
until the device's queue drains, and a CUDA graph cannot hold it; on the CPU both are free,
so it catches them by name (and on CUDA also asks torch's sync debug mode).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from trainers.config import CompileMode

F = TypeVar("F", bound=Callable[..., object])


def compiled(fn: F, mode: CompileMode) -> F:
    """``fn`` compiled by ``torch.compile`` (Inductor, whole graph) when ``mode`` is
    ``inductor`` or ``kernel``; ``fn`` itself otherwise."""
    if mode not in ("inductor", "kernel"):
        return fn
    return torch.compile(fn, fullgraph=True)  # type: ignore[return-value]


class Recorded:
    """``step()`` (which returns nothing and works on static buffers) replayed from a CUDA
    graph: the first call runs it on a side stream (lazy initialisation, cuBLAS workspaces,
    Inductor's compilation), the second records and then replays it, later calls replay.
    Not enabled (the CPU, or ``train.compile: eager``), every call runs ``step`` itself."""

    def __init__(self, step: Callable[[], None], enabled: bool) -> None:
        self.step, self.enabled = step, enabled
        self.graph: torch.cuda.CUDAGraph | None = None
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1
        if not self.enabled:
            self.step()
        elif self.calls == 1:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self.step()
            torch.cuda.current_stream().wait_stream(side)
        else:
            if self.graph is None:
                self.graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(self.graph):
                    self.step()
            self.graph.replay()


def capturing(device: torch.device, mode: CompileMode) -> bool:
    """Whether steps on ``device`` are recorded and replayed under ``mode``."""
    return device.type == "cuda" and mode != "eager"


aten = torch.ops.aten

HOST_READS = {aten._local_scalar_dense.default, aten.is_nonzero.default, aten.equal.default, aten.nonzero.default,
              aten.nonzero_numpy.default, aten.allclose.default}
"""ATen ops that hand device values to the host: ``.item()``, ``bool()``, ``int()``,
``float()`` (all ``_local_scalar_dense``), ``torch.equal``, ``nonzero`` (its size)."""

HOST_FUNCTIONS: set[Callable[..., Any]] = {
    torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.cpu, torch.Tensor.numpy, torch.Tensor.__bool__,
    torch.Tensor.__int__, torch.Tensor.__float__, torch.tensor, torch.as_tensor, torch.from_numpy,
}
"""Torch functions that read a tensor on the host or build one from host data."""


class HostReadError(AssertionError):
    """A guarded block read device memory on the host or built a tensor from host data."""


class _Functions(TorchFunctionMode):
    def __torch_function__(self, func: Callable[..., Any], types: Any, args: tuple = (), kwargs: dict | None = None):
        if func in HOST_FUNCTIONS:
            raise HostReadError(f"{getattr(func, '__qualname__', func)} inside a guarded step")
        if func is torch.Tensor.to and any(_names_cpu(a) for a in (*args[1:], *(kwargs or {}).values())):
            raise HostReadError("Tensor.to('cpu') inside a guarded step")
        return func(*args, **(kwargs or {}))


class _Dispatch(TorchDispatchMode):
    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None):
        if func in HOST_READS:
            raise HostReadError(f"aten.{func.__name__} inside a guarded step")
        return func(*args, **(kwargs or {}))


def _names_cpu(value: object) -> bool:
    return (isinstance(value, str) and value.startswith("cpu")) or (
        isinstance(value, torch.device) and value.type == "cpu")


@contextmanager
def no_host_reads(cuda: bool = False) -> Iterator[None]:
    """Raise :class:`HostReadError` on any host read or host-built tensor inside the block;
    with ``cuda``, torch's sync debug mode raises on any synchronising CUDA call as well."""
    if cuda:
        torch.cuda.set_sync_debug_mode("error")
    try:
        with _Functions(), _Dispatch():
            yield
    finally:
        if cuda:
            torch.cuda.set_sync_debug_mode("default")
