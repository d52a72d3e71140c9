"""The device script's update section (benchmarks/perf/gpu.py): the bytes one PPO update moves
per sample and epoch, counted, against the bytes it must move; on CUDA, its rate against the
bandwidth roofline of those necessary bytes (docs/training.md, the update's bytes).

Three forms of the update are measured side by side: ``matmul`` (every layer a batched
matmul) and ``fused`` (the narrow layers as products and sums, which Inductor fuses with the
loss around them; :data:`trainers.ppo.batched.NARROW`), both through autograd, and ``kernel``
(``train.compile: kernel``: the loss and its gradients in one Triton kernel,
trainers/ppo/kernel.py). Bytes are counted two ways:

* eager: every ATen op's inputs and outputs (:func:`benchmarks.perf.gpu_common.bytes_moved`);
* compiled: the forward and backward graphs Inductor compiles, by its own count of the buffers
  each kernel reads and writes (``torch._inductor.metrics``), or the Triton kernel by its own
  (:func:`trainers.ppo.kernel.bytes_accessed`) with the torch ops around it; plus the eager Adam
  step beside them.

The kernel's gradients are checked against autograd's on the same minibatch (``kernel_error``:
the largest difference over the largest gradient). On CUDA each of its builds
(:data:`trainers.ppo.kernel.LAUNCHES`: FP32 or TF32×3 matmuls, with or without a software
pipeline, in two shapes of work) is timed on one of
the headline's minibatches and checked the same way, and the update's rate is measured with the
fastest build within :data:`~benchmarks.perf.gpu_common.KERNEL_ERROR`. The device script's
headline trains with the kernel, in that build, only where its update was faster than Inductor's
(benchmarks/perf/gpu_train.py).

On the GPU machine it is one section of the device script; here it is also a benchmark of its own:

    .venv/bin/python -m benchmarks.perf.gpu_update     # this machine's counts into docs/benchmarks.md

trainers/, torch and numpy only (its ``main`` records with benchmarks/common.py).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import torch

from benchmarks.perf.gpu_common import HEADLINE, KERNEL_ERROR, TINY, Args, bytes_moved, necessary_update_bytes, timed
from benchmarks.perf.gpu_market import sample_market
from benchmarks.perf.gpu_train import population
from trainers.config import RuntimeConfig
from trainers.ppo import kernel  # before anything compiles: on a CPU it sets Triton's interpreter up
from trainers.ppo.loss import ppo_loss
from trainers.ppo.ppo import PPO

FORMS = {"kernel": ("kernel", True), "fused": ("inductor", True), "matmul": ("inductor", False)}
"""The update's forms: its ``train.compile``, and whether the narrow layers are products and sums;
in the order they are measured, so that a section its budget cuts short loses the oldest first."""



COUNTED = {"num_envs": 64, "horizon": 32, "batch_size": 1024, "repeat_times": 2}
"""The shapes the bytes are counted at (per sample, they hardly depend on them)."""


def section_update(args: Args) -> dict[str, Any]:
    """Per form: bytes per sample-epoch, eager and compiled, beside the necessary bytes; on
    CUDA, sample-epochs/s of a whole update at the headline's shapes (Inductor and CUDA
    graphs) and its share of the measured copy bandwidth at the necessary bytes."""
    stocks, agents = (4, 2) if args.tiny else (100, 16 if args.device == "cuda" else 2)
    shapes = TINY if args.tiny else COUNTED
    data = sample_market(stocks, 300 if args.tiny else 5000, seed=0, device=args.device)
    device = args.load("device") or {}
    out: dict[str, Any] = {"rows": [], "shapes": shapes, "agents": agents, "stocks": stocks}
    for form, (compile, fused) in FORMS.items():
        if args.remaining() < 20:
            return out | {"cut_short": True}
        try:
            row = _counted(data, agents, shapes, fused, compile) | {"form": form}
            if args.device == "cuda":
                row |= _rate(args, data, agents, TINY if args.tiny else HEADLINE, fused, compile)
                if "copy_gbs" in device:
                    row["roofline_share"] = (row["sample_epochs_per_s"] * row["necessary_bytes"] / 1e9
                                             / device["copy_gbs"])
        except Exception as error:  # noqa: BLE001 - a form that fails on a new stack leaves the others measured
            row = {"form": form, "error": f"{type(error).__name__}: {error}"[:500]}
        out["rows"].append(row)
        args.save("update", out)
    return out


def _ready(data: Any, agents: int, shapes: dict[str, int], fused: bool) -> tuple[PPO, Any]:
    """A population after one eager iteration, the narrow layers in the given form, its group loaded."""
    ppo = population(data, agents, RuntimeConfig(), **shapes)
    ppo.nets.fused = fused
    group = list(range(agents))
    ppo.train_iteration(group)
    return ppo, ppo.group(group)


def _counted(data: Any, agents: int, shapes: dict[str, int], fused: bool, compile: str) -> dict[str, Any]:
    """One static gradient step's bytes per sample-epoch: eager (the whole step and the loss's
    forward and backward alone) and with the loss compiled by Inductor, or by the kernel; and the
    seconds the compiled loss's forward and backward take (not the kernel's in Triton's
    interpreter, which says nothing of its speed)."""
    ppo, group = _ready(data, agents, shapes, fused)
    weight, active = group.schedule.static_masks()
    idx, loss_and_grad = _minibatch(ppo, group.batch, agents, weight[0])
    samples = idx.numel()
    step = bytes_moved(lambda: ppo.static_step(group.batch, idx, weight[0], active[0]))
    loss = bytes_moved(lambda: loss_and_grad(ppo_loss))
    per_action = ppo.cfg.credit == "per_stock"
    row = {"eager_bytes": step / samples, "samples_per_step": samples,
           "necessary_bytes": necessary_update_bytes(data.n_stocks, ppo.envs[0].state_dim, per_action)}
    if compile == "kernel":
        fn = kernel.kernel_loss(weight.device)
        launch = kernel._kernel
        kernel._kernel = _Unlaunched()  # the torch ops beside the kernel alone (in Triton's interpreter
        try:  # the launch itself runs torch copies that a compiled kernel does not)
            around = bytes_moved(lambda: loss_and_grad(fn))
        finally:
            kernel._kernel = launch
        compiled = around + kernel.bytes_accessed(ppo.nets, group.batch, idx)
        row |= {"eager_bytes": None, "kernel_error": _error(loss_and_grad(fn), loss_and_grad(ppo_loss))}
    else:
        fn = torch.compile(ppo_loss, fullgraph=True)
        compiled = _inductor_bytes(lambda: loss_and_grad(fn))
    if compile != "kernel" or weight.device.type == "cuda":
        row["compiled_loss_s"] = timed(lambda: loss_and_grad(fn), weight.device, repeats=5)
    return row | {"compiled_bytes": (compiled + step - loss) / samples}


def _minibatch(ppo: PPO, batch: tuple[torch.Tensor, ...], agents: int, weight: torch.Tensor
               ) -> tuple[torch.Tensor, Any]:
    """A minibatch of random rows of ``batch`` (the static schedule's width, ``weight``'s), and a
    function of a loss (:func:`trainers.ppo.loss.ppo_loss`'s arguments) giving its gradients on it."""
    idx = torch.randint(0, batch[0].shape[0], weight.shape, generator=torch.Generator().manual_seed(0)
                        ).to(weight.device)
    hp = (ppo.hparam("clip"), ppo.hparam("entropy_coef"), ppo.cfg.value_coef)

    def loss_and_grad(loss_fn: Any) -> list[torch.Tensor]:
        nets = ppo.nets.sub(list(range(agents)), grad=True)
        return list(torch.autograd.grad(loss_fn(nets, batch, idx, weight, *hp), nets.params))

    return idx, loss_and_grad


def _error(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    """The largest difference between two sets of gradients, over the largest of ``want``."""
    return max(float((g - w).abs().max()) for g, w in zip(got, want)) / max(float(w.abs().max()) for w in want)


def launch_rows(args: Args, ppo: PPO, batch: tuple[torch.Tensor, ...], agents: int) -> list[dict[str, Any]]:
    """Each build of the update kernel (:data:`trainers.ppo.kernel.LAUNCHES`) on one static
    minibatch of ``batch``: the seconds of its first call (Triton builds it then), the seconds of
    a call after, and its gradients against autograd's (:func:`_error`). A build that fails
    leaves the others measured; on a CPU they run in Triton's interpreter, which ignores how a
    build is made, so only the check there means anything."""
    weight, _ = ppo.group(list(range(agents))).schedule.static_masks()
    _, loss_and_grad = _minibatch(ppo, batch, agents, weight[0])
    fused, ppo.nets.fused = ppo.nets.fused, False  # autograd's as matmuls: the products' [N, rows, in, out]
    try:  # would be 12 GB at the headline's minibatch
        want = loss_and_grad(ppo_loss)
    finally:
        ppo.nets.fused = fused
    fn, shipped, rows = kernel.kernel_loss(weight.device), kernel.LAUNCH, []
    try:
        for launch in kernel.LAUNCHES:
            if args.remaining() < 20:
                break
            kernel.LAUNCH = launch
            row: dict[str, Any] = launch._asdict()
            try:
                row["first_call_s"] = timed(lambda: loss_and_grad(fn), weight.device)
                row["kernel_error"] = _error(loss_and_grad(fn), want)
                row["loss_s"] = timed(lambda: loss_and_grad(fn), weight.device, repeats=5)
            except Exception as error:  # noqa: BLE001 - a build a new stack refuses leaves the others
                row["error"] = f"{type(error).__name__}: {error}"[:300]
            rows.append(row)
    finally:
        kernel.LAUNCH = shipped
    return rows


def fastest_launch(rows: list[dict[str, Any]]) -> kernel.Launch | None:
    """The fastest of the measured builds whose gradients were within
    :data:`~benchmarks.perf.gpu_common.KERNEL_ERROR` of autograd's (:func:`launch_rows`); None if none was."""
    right = [r for r in rows if "loss_s" in r and r["kernel_error"] <= KERNEL_ERROR]
    best = min(right, key=lambda r: r["loss_s"], default=None)
    return None if best is None else kernel.Launch.of(best)


class _Unlaunched:
    """A kernel whose launch does nothing."""

    def __getitem__(self, grid: Any) -> Any:
        return lambda *args, **kwargs: None


def _inductor_bytes(fn: Any) -> int:
    """Bytes the kernels Inductor generates for ``fn``'s graphs read and write per call, by its
    own count (``torch._inductor.metrics``, kept while it compiles with its metrics log on, and
    the log's lines dropped). The caches of whole compiled graphs (Inductor's FX graph cache and
    AOT autograd's) are off, so that Inductor generates the kernels here and counts them; the
    cache of the kernels' compiled code stays on: with every cache off, the CPU smoke's update
    section took 42 s each run, and with this 22 s with an empty cache and 12 s after."""
    from torch._functorch import config as functorch_config
    from torch._inductor import config, metrics

    log = logging.getLogger("torch._inductor.compile_fx.__inductor_metrics")
    level, propagate = log.level, log.propagate
    log.setLevel(logging.INFO)
    log.propagate = False
    torch._dynamo.reset()
    metrics.reset()
    try:
        with config.patch(fx_graph_cache=False), functorch_config.patch(enable_autograd_cache=False):
            fn()
        return int(metrics.num_bytes_accessed)
    finally:
        log.setLevel(level)
        log.propagate = propagate


def _rate(args: Args, data: Any, agents: int, shapes: dict[str, int], fused: bool, compile: str) -> dict[str, Any]:
    """Sample-epochs/s of a whole update as training runs it on CUDA (Inductor or the kernel,
    recorded), its steps warmed up and recorded by two iterations before. For the kernel, its
    builds are timed first (:func:`launch_rows`), and the update runs with the fastest right one."""
    ppo = population(data, agents, RuntimeConfig(compile=compile), **shapes)
    ppo.nets.fused = fused
    members, out, shipped = list(range(agents)), {}, kernel.LAUNCH
    try:
        rollout = ppo.collect(members)
        if compile == "kernel":  # before the update records its steps with a build
            out["launches"] = launch_rows(args, ppo, ppo.samples(members, rollout), agents)
            kernel.LAUNCH = fastest_launch(out["launches"]) or shipped
            out["launch"] = kernel.LAUNCH._asdict()
        ppo.update(members, rollout)
        ppo.train_iteration(members)
        rollout = ppo.collect(members)
        device = torch.device(args.device)
        seconds = timed(lambda: ppo.update(members, rollout), device)
    finally:
        kernel.LAUNCH = shipped
    sample_epochs = agents * shapes["num_envs"] * shapes["horizon"] * shapes["repeat_times"]
    return out | {"update_s": seconds, "sample_epochs_per_s": sample_epochs / seconds}


def update_table(result: dict[str, Any]) -> str:
    """The section's rows as a markdown table."""
    lines = ["| form | bytes/sample-epoch, eager | compiled | necessary | compiled / necessary "
             "| compiled loss + backward, s/step | gradients against autograd | sample-epochs/s (CUDA) "
             "| share of the copy roofline |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        if "error" in r:
            lines.append(f"| {r['form']} | failed: {r['error'][:200]} |" + " |" * 7)
            continue
        eager = f"{r['eager_bytes']:,.0f}" if r.get("eager_bytes") is not None else "-"
        seconds = f"{r['compiled_loss_s'] * 1e3:.1f} ms" if "compiled_loss_s" in r else "- (interpreted)"
        error = f"{r['kernel_error']:.1e}" if "kernel_error" in r else "-"
        rate = f"{r['sample_epochs_per_s'] / 1e6:,.1f} M" if "sample_epochs_per_s" in r else "-"
        share = f"{r['roofline_share']:.1%}" if "roofline_share" in r else "-"
        lines.append(f"| {r['form']} | {eager} | {r['compiled_bytes']:,.0f} | {r['necessary_bytes']:,} "
                     f"| {r['compiled_bytes'] / r['necessary_bytes']:.1f}x | {seconds} | {error} | {rate} | {share} |")
    launches = next((r for r in result["rows"] if r.get("launches")), None)
    return "\n".join(lines) + ("" if launches is None else "\n\n" + launch_table(launches))


def launch_table(row: dict[str, Any]) -> str:
    """The kernel's builds as :func:`launch_rows` measured them, and the one its update ran with."""
    lines = ["The update kernel's builds on one of the headline's minibatches (its update's rate above is "
             f"with {kernel.Launch.of(row['launch']).text()}: the fastest within {KERNEL_ERROR:.0e} of "
             "autograd's gradients, or the shipped build where none was):", "",
             "| warps | matmuls | stages | samples × stocks, state entries at a time | first call (builds it), s "
             "| loss and gradients, ms | gradients against autograd |", "|---:|---|---:|---|---:|---:|---:|"]
    for r in row["launches"]:
        b = kernel.Launch.of(r)
        build = f"| {b.warps} | {b.dot} | {b.stages} | {b.block} × {b.stocks}, {b.chunk} |"
        if "error" in r:
            lines.append(f"{build} failed: {r['error'][:200]} | | |")
        else:
            lines.append(f"{build} {r['first_call_s']:.2f} | {r['loss_s'] * 1e3:.2f} | {r['kernel_error']:.1e} |")
    return "\n".join(lines)


def main() -> None:
    """Count the update's bytes on this machine's CPU, print the table and record it."""
    import argparse
    import tempfile
    from pathlib import Path

    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # `--help`: this, and nothing measured

    from benchmarks.common import Reading, commit, now, record
    from benchmarks.perf.gpu_common import Args

    with tempfile.TemporaryDirectory() as out:
        result = section_update(Args("cpu", False, Path(out), time.monotonic() + 600, 0.0))
    table = update_table(result)
    print(table)
    shapes = result["shapes"]
    latest = (f"`.venv/bin/python -m benchmarks.perf.gpu_update` (2 CPU cores; on a GPU the device script's "
              f"`update` section, in the GPU section). PPO's static gradient step at the paper's config, "
              f"{result['stocks']} stocks, {result['agents']} agents, minibatches of {shapes['batch_size']:,} "
              f"samples each: bytes per sample and epoch, counted op by op (eager) and compiled: by Inductor's own "
              f"count of its kernels (the loss's forward and backward), or for `kernel` by the Triton kernel's "
              f"own count with the torch ops beside it (run here in Triton's interpreter, so not timed); the Adam "
              f"step eager in both; against the bytes any update must read (docs/training.md, the update's "
              f"bytes).\n\n{table}")
    form = {r["form"]: r for r in result["rows"]}
    matmul, fused, kernel = form["matmul"], form["fused"], form.get("kernel", {})
    record(Reading("update-bytes", "The PPO update's bytes: benchmarks/perf/gpu_update.py", latest,
                   ("date", "commit", "eager bytes", "Inductor bytes (matmul)", "Inductor bytes (fused)",
                    "necessary bytes", "compiled step, matmul / fused", "kernel bytes", "kernel gradient error"),
                   (now(), commit(), f"{matmul['eager_bytes']:,.0f}", f"{matmul['compiled_bytes']:,.0f}",
                    f"{fused['compiled_bytes']:,.0f}", f"{fused['necessary_bytes']:,}",
                    f"{matmul['compiled_loss_s'] / fused['compiled_loss_s']:.2f}x",
                    f"{kernel['compiled_bytes']:,.0f}" if kernel else "-",
                    f"{kernel['kernel_error']:.1e}" if kernel else "-")))


if __name__ == "__main__":
    main()
