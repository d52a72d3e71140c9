"""What the device script's sections share (benchmarks/perf/gpu.py): its arguments, the paper's
configs, a timer, a byte counter and a ready-made env. trainers/, torch and numpy only."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.perf.gpu_market import sample_market
from trainers.common.env import MarketData, MarketEnv
from trainers.common.state import StateScales
from trainers.config import EnvConfig, PPOConfig, RuntimeConfig
from trainers.population.config import EvolutionConfig
from trainers.population.evolution import Evolution


@dataclass(frozen=True)
class Args:
    device: str
    tiny: bool
    out: Path
    deadline: float
    """``time.monotonic()`` by which the section (or the whole run) must be done."""
    headline_seconds: float
    section: str | None = None
    env_sizes: tuple[int, ...] = (4096, 16384, 65536)
    agents: tuple[int, ...] = (1, 4, 16, 64, 256)

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def save(self, name: str, result: dict[str, Any]) -> None:
        """Write ``OUT/NAME.json`` now (a section saves what it has as it goes), whole or not at
        all: a section killed at its budget leaves its last save readable."""
        path = self.out / f"{name}.json"
        part = path.with_suffix(".part")
        part.write_text(json.dumps(result, indent=1, default=str))
        part.replace(path)

    def load(self, name: str) -> dict[str, Any] | None:
        path = self.out / f"{name}.json"
        return json.loads(path.read_text()) if path.exists() else None


HEADLINE = {"num_envs": 2048, "horizon": 128, "batch_size": 32768, "repeat_times": 2}
"""The headline's PPO shapes (benchmarks/perf/gpu_train.py): 2,048 envs an agent, minibatches of
32,768 of its 262,144 samples, 2 passes over them. Two passes, not eight: on the development seeds
of both markets fewer passes learned as well or better, at a quarter of the update's work; one
pass did not, on one minute seed in ten (docs/results.md, fewer passes over larger batches)."""
KERNEL_ERROR = 1e-4
"""The most the update kernel's gradients may differ from autograd's, over the largest, for the
headline to train with it (benchmarks/perf/gpu_update.py measures it)."""
TINY = {"num_envs": 4, "horizon": 8, "batch_size": 16, "repeat_times": 2}
"""The same, for the CPU smoke (``--tiny``)."""


class Stop(Exception):
    """Training stops here: a wall budget is spent, or a run is cut short on purpose."""


def necessary_update_bytes(stocks: int, state_dim: int, per_action: bool) -> int:
    """Bytes any update must move per sample and epoch: read the sample's state, its pre-``tanh``
    actions, its old log-probability, advantage (per stock with ``credit: per_stock``) and value
    target, float32 each. The weights and their gradients are shared by a minibatch's
    thousands of samples, so they are left out."""
    per = stocks if per_action else 1
    return 4 * (state_dim + stocks + 2 * per + 1)


def paper_env() -> EnvConfig:
    """``params.paper.yaml``'s env (tests/benchmarks/perf/test_gpu.py keeps them equal)."""
    return EnvConfig(action="weights", rebalance_band=0.01, decide_every=5, reward="excess")


def paper_ppo(**changes: Any) -> PPOConfig:
    """``params.paper.yaml``'s PPO, with ``changes``."""
    return PPOConfig(**{"lr": 2**-11, "net_dims": (8,), "init_log_std": -2.5, "policy": "shared",
                        "credit": "per_stock", "average": 128, **changes})


def scales_of(data: MarketData, first: int) -> StateScales:
    """The state's constants as the train stage makes them: cash over the paper env's initial
    cash, shares over its hmax, prices over bar ``first``'s closes."""
    cfg = paper_env()
    return StateScales(1 / cfg.initial_cash, 1 / cfg.hmax, tuple(data.close[first].cpu().tolist()))


def paper_evolution(data: MarketData, train: tuple[int, int], validation: tuple[int, int], shapes: dict[str, int],
                    evo: EvolutionConfig, runtime: RuntimeConfig | None = None) -> Evolution:
    """An evolution of the paper's env and PPO at ``shapes`` on the minute market's windows."""
    return Evolution(data, scales_of(data, train[0]), paper_env(), paper_ppo(**shapes), evo, train, validation,
                     252.0 * 390, runtime=runtime or RuntimeConfig())


def sync(device: torch.device) -> None:
    """Wait for the device's queue to drain (a CUDA device; nothing to wait for on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn: Callable[[], object], device: torch.device, repeats: int = 1) -> float:
    """Seconds per call of ``fn``, the device's queue drained before and after."""
    sync(device)
    started = time.perf_counter()
    for _ in range(repeats):
        fn()
    sync(device)
    return (time.perf_counter() - started) / repeats


VIEWS = {"view", "_unsafe_view", "reshape", "slice", "select", "expand", "unsqueeze", "squeeze", "t", "permute",
         "transpose", "as_strided", "alias", "detach", "unflatten", "split", "split_with_sizes", "unbind", "lift_fresh",
         "empty", "empty_like", "empty_strided", "_to_copy_noop"}
GATHERS = {"index_select", "index", "gather", "embedding"}


class _Bytes(TorchDispatchMode):
    """Bytes each ATen op reads and writes: its tensor inputs and outputs in full (a gather:
    the rows it takes, its index and its output); views move nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.total = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None):
        out = func(*args, **(kwargs or {}))
        name = func.__name__.split(".")[0]
        if name in VIEWS:
            return out
        outs = [t for t in _tensors(out)]
        if name in GATHERS:
            index = [t for t in _tensors(args[1:]) if not t.is_floating_point()]
            self.total += 2 * sum(t.nbytes for t in outs) + sum(t.nbytes for t in index)
        else:
            self.total += sum(t.nbytes for t in _tensors((args, kwargs))) + sum(t.nbytes for t in outs)
        return out


def _tensors(tree: object) -> list[torch.Tensor]:
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, (list, tuple)):
        return [t for item in tree for t in _tensors(item)]
    if isinstance(tree, dict):
        return [t for item in tree.values() for t in _tensors(item)]
    return []


def bytes_moved(fn: Callable[[], object]) -> int:
    """Bytes the eager kernels of one call of ``fn`` read and write, counted op by op."""
    with _Bytes() as counter:
        fn()
    return counter.total


def sample_env(args: Args, stocks: int, envs: int, steps: int) -> tuple[MarketEnv, torch.Tensor,
                                                                           tuple[torch.Tensor, torch.Tensor],
                                                                           torch.Tensor]:
    """A static env of the paper's rules on a random-walk market, reset, with a fixed random
    action, ``steps`` drawn episodes and a next-state buffer."""
    bars = 400 if args.tiny else 20_000
    data = sample_market(stocks, bars, seed=0, device=args.device)
    env = MarketEnv(data, scales_of(data, 0), paper_env(), envs, (0, bars - 1), seed=0)
    env.static = True
    env.reset()
    action = (torch.rand(envs, stocks, generator=torch.Generator().manual_seed(1)) * 2 - 1).to(args.device)
    return env, action, env.draw_episodes(steps), torch.empty((envs, env.state_dim), device=args.device)
