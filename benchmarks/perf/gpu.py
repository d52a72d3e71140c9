"""Everything the GPU workers need measured, in one script for a short lease of a GPU machine
(docs/training.md, GPU workers; docs/benchmarks.md, GPU). It needs only trainers/, torch and
numpy, and keeps a global deadline (8 minutes by default).

Each section runs in a process of its own, so a CUDA error in one (a failed graph capture,
say) cannot take the others down, and writes ``OUT/SECTION.json`` as soon as it ends:

* ``device``: the GPU, its measured copy bandwidth and FP32 matmul rate;
* ``sync``: the static rollout, the PPO and SAC gradient steps, the evaluator's decision and
  the update kernel's loss and gradients under torch's sync debug mode (``error``) and
  :func:`trainers.common.capture.no_host_reads`;
* ``env``: env steps/s at 100 stocks x 4,096 / 16,384 / 65,536 envs, eager, CUDA graphs and
  Inductor, with the bytes a step moves against the memory bandwidth;
* ``ppo``: PPO samples/s for populations of 1 to 256 agents at 30 and 100 stocks, eager and
  recorded, with the update's share of the FP32 peak (benchmarks/perf/gpu_train.py);
* ``update``: the bytes one PPO update moves per sample-epoch, eager and compiled, in both
  forms of the batched model and as the Triton kernel (its gradients against autograd's, and
  each of its builds timed), against the bytes it must move, and its rate against the copy
  roofline of those (benchmarks/perf/gpu_update.py);
* ``parity``: one generation on CUDA against the CPU (same random draws), and a checkpoint
  resumed across devices (benchmarks/perf/gpu_parity.py);
* ``dask``: a short evolution's jobs on a real ``dask scheduler`` and two ``--resources GPU=1``
  workers pinned to the GPU, against the same run in this process (benchmarks/perf/gpu_dask.py;
  it needs dask's wheels, which travel in ``.whl/``);
* ``headline``: a population of 16 on the paper-scale minute market for a wall budget, its
  test-year Sharpe beside buy-and-hold and momentum, and an RL-Scope breakdown
  (benchmarks/perf/gpu_train.py; ``headline.json``, the profile in it); it trains with the
  update kernel, in its fastest right build, where the update section found it faster than
  Inductor's update.

A section that outlives its budget is stopped, and keeps what it had saved. ``ppo`` and ``dask``
(their readings are recorded) can be left out of a run for the training figures: ``--sections
device sync env update parity headline`` leaves the headline its full training budget.

    make gpu-prep                                                    # here first: dask's wheels, the tree's stamp
    python3 -m pip install --no-deps .whl/*.whl                      # on the GPU machine (.whl and .stamp carried)
    python3 -m benchmarks.perf.gpu --out OUT                         # there: about 8 minutes
    .venv/bin/python -m benchmarks.perf.gpu --device cpu --tiny  # here: every section at toy sizes (make test runs it)
    .venv/bin/python -m benchmarks.perf.gpu --record OUT            # here: the device's JSON into docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from benchmarks.perf import gpu_train
from benchmarks.perf.gpu_common import Args, bytes_moved, sample_env, timed
from benchmarks.perf.gpu_dask import section_dask
from benchmarks.perf.gpu_parity import section_parity
from benchmarks.perf.gpu_update import section_update
from benchmarks.perf.tree import tree_state
from trainers.common.capture import HostReadError, Recorded, no_host_reads

ROOT = Path(__file__).resolve().parents[2]
"""The repository root (the device script runs from it on a bare GPU machine, uninstalled)."""

SECTIONS = ("device", "sync", "env", "ppo", "update", "parity", "dask", "headline")
BUDGET = {"device": 20, "sync": 40, "env": 80, "ppo": 90, "update": 180, "parity": 40, "dask": 90, "headline": 10_000}
"""Each section's most seconds on the device; the headline takes what the deadline leaves. At
``--tiny`` sizes (the CPU smoke) a section may take what the deadline leaves: the smoke asks
whether every section runs, and a shared 2-core machine can be several times slower than usual."""
NOMINAL = {"H100": {"fp32_tflops": 67.0, "bandwidth_gbs": 3350.0},
           "H200": {"fp32_tflops": 67.0, "bandwidth_gbs": 4800.0}}
"""Data-sheet peaks (SXM parts) beside the measured ones."""


def _installed(name: str) -> str | None:
    """The installed version of distribution ``name``, without importing it (importing Triton
    would settle whether its interpreter runs kernels, trainers/ppo/kernel.py); None without it."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def section_device(args: Args) -> dict[str, Any]:
    """The device, and what it measurably does: a large copy's GB/s and an FP32 matmul's TFLOP/s."""
    dev = torch.device(args.device)
    out: dict[str, Any] = {"torch": torch.__version__, "triton": _installed("triton"), "numpy": _installed("numpy"),
                           "python": platform.python_version()}
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        out |= {"name": props.name, "capability": f"{props.major}.{props.minor}", "sms": props.multi_processor_count,
                "memory_gib": props.total_memory / 2**30, "cuda": torch.version.cuda}
        out["nominal"] = next((v for k, v in NOMINAL.items() if k in props.name), None)
    else:
        out |= {"name": f"{platform.processor() or platform.machine()} ({torch.get_num_threads()} threads)"}
    small = args.tiny or dev.type == "cpu"
    size = 2**26 if small else 2**28  # float32 elements: 256 MiB or 1 GiB
    src, dst = torch.empty(size, device=dev), torch.empty(size, device=dev)
    dst.copy_(src)  # warm-up
    seconds = timed(lambda: dst.copy_(src), dev, repeats=10)
    out["copy_gbs"] = 2 * src.nbytes / seconds / 1e9  # read + write
    n = 2048 if small else 8192
    torch.backends.cuda.matmul.allow_tf32 = False
    a, b = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)
    _ = a @ b  # warm-up (cuBLAS's handle and workspace)
    out["fp32_matmul_tflops"] = 2 * n**3 / timed(lambda: a @ b, dev, repeats=5) / 1e12
    return out


def section_sync(args: Args) -> dict[str, Any]:
    """Each hot step once more after a warm-up, under the host-read guard (and, on CUDA,
    ``torch.cuda.set_sync_debug_mode("error")``): ``ok``, or the error it raised."""
    steps = gpu_train.hot_steps(args)
    results = {}
    for name, step in steps.items():
        try:
            with no_host_reads(cuda=args.device == "cuda"):
                step()
            results[name] = "ok"
        except (HostReadError, RuntimeError) as error:
            results[name] = f"{type(error).__name__}: {error}".splitlines()[0]
    return {"steps": results, "all_ok": all(v == "ok" for v in results.values())}


def section_env(args: Args) -> dict[str, Any]:
    """Env steps/s of the paper's env (weights, no-trade band, a decision every 5 bars) at 100
    stocks, with fixed random actions, eager, recorded (CUDA graphs) and compiled (Inductor,
    recorded on CUDA); bytes per step counted on the eager kernels' inputs and outputs."""
    sizes = [64, 256] if args.tiny else list(args.env_sizes)
    stocks, steps = (8, 8) if args.tiny else (100, 64)
    rows = []
    for envs in sizes:
        for mode in ("eager", "graphs", "inductor"):
            if args.device != "cuda" and mode == "graphs":
                continue
            if mode == "inductor" and envs != sizes[min(1, len(sizes) - 1)]:
                continue  # one compile: the target size
            if args.remaining() < 20:
                break
            try:
                rows.append(_env_rate(args, stocks, envs, steps, mode))
            except Exception as error:  # noqa: BLE001 - the next size or mode may still run
                rows.append({"envs": envs, "mode": mode, "error": f"{type(error).__name__}: {error}"[:500]})
            print(json.dumps(rows[-1]), flush=True)
            args.save("env", {"rows": rows, "stocks": stocks})
    return {"rows": rows, "stocks": stocks}


def _env_rate(args: Args, stocks: int, envs: int, steps: int, mode: str) -> dict[str, Any]:
    env, action, episodes, obs = sample_env(args, stocks, envs, steps)
    chunk = 8

    def run_chunk() -> None:
        for t in range(chunk):
            step(action, out=obs, episodes=(episodes[0][t], episodes[1][t]))
        env.pin()

    step = gpu_train.compiled_step(env, mode)
    env.pin()
    started = time.perf_counter()
    recorded = Recorded(run_chunk, enabled=args.device == "cuda" and mode != "eager")
    recorded()  # warm-up (and Inductor's compilation)
    recorded()  # recorded here (CUDA graphs)
    warm = time.perf_counter() - started
    seconds = timed(recorded, torch.device(args.device), repeats=max(1, steps // chunk))
    row: dict[str, Any] = {"envs": envs, "mode": mode, "steps_per_s": envs * chunk / seconds, "warmup_s": warm}
    if mode == "eager":
        row["bytes_per_env_step"] = bytes_moved(lambda: env.step(action, out=obs, episodes=(episodes[0][0],
                                                                                              episodes[1][0]))) / envs
    row["necessary_bytes_per_env_step"] = necessary_bytes(stocks, env.state_dim)
    row["final_states_listed"] = env.slots.width  # of envs: the static step's slots for truncated envs
    return row


def necessary_bytes(stocks: int, state_dim: int) -> int:
    """Bytes any implementation of a step must move per env: read and write the account (cash,
    value, clock, episode end: 8 bytes each; float64 shares), read the action (float32), the
    next open and close of every stock (float64) and the next state's bar row (float32), and
    write the next state."""
    account = 4 * 8 + stocks * 8
    return 2 * account + stocks * 4 + 2 * stocks * 8 + 2 * state_dim * 4


SECTION_FUNCTIONS: dict[str, Callable[[Args], dict[str, Any]]] = {
    "device": section_device, "sync": section_sync, "env": section_env, "ppo": gpu_train.section_ppo,
    "update": section_update, "parity": section_parity, "dask": section_dask,
    "headline": gpu_train.section_headline}


def run_section(args: Args) -> None:
    """The child: one section, its JSON written as it goes and at the end (an error is a
    result too, beside what the section had saved before it)."""
    assert args.section is not None
    started = time.perf_counter()
    try:
        result = {"ok": True, **SECTION_FUNCTIONS[args.section](args)}
    except Exception as error:  # noqa: BLE001 - a failed section is reported, and the next one runs
        result = {**(args.load(args.section) or {}), "ok": False, "error": f"{type(error).__name__}: {error}",
                  "trace": traceback.format_exc()[-3000:]}
    tree = tree_state()
    result |= {"section": args.section, "seconds": time.perf_counter() - started, "device": args.device,
               "commit": tree["commit"], "tree": tree}
    args.save(args.section, result)


def orchestrate(args: Args, sections: list[str]) -> dict[str, Any]:
    """Each section in a child process, within its budget and the global deadline."""
    done: dict[str, Any] = {}
    for name in sections:
        left = args.remaining()
        if left < 15:
            done[name] = {"ok": False, "error": "skipped: the deadline came first"}
            continue
        budget = left - 5 if args.tiny else min(BUDGET[name], left - 5)
        command = [sys.executable, "-m", "benchmarks.perf.gpu", "--section", name, "--device", args.device,
                   "--out", str(args.out),
                   "--deadline", str(budget), "--headline-seconds", str(args.headline_seconds),
                   "--env-sizes", *map(str, args.env_sizes), "--agents", *map(str, args.agents),
                   *(["--tiny"] if args.tiny else [])]
        print(f"== {name} (up to {budget:.0f} s, {left:.0f} s left)", flush=True)
        try:
            subprocess.run(command, check=False, timeout=budget + 10, cwd=ROOT)
        except subprocess.TimeoutExpired:  # what the section saved as it went stays
            args.save(name, {**(args.load(name) or {}), "ok": False, "section": name,
                             "error": f"timed out after {budget:.0f} s"})
        path = args.out / f"{name}.json"
        done[name] = json.loads(path.read_text()) if path.exists() else {"ok": False, "error": "no result"}
        print(f"   {name}: {'ok' if done[name].get('ok') else done[name].get('error')}", flush=True)
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tiny", action="store_true", help="toy sizes: every code path in seconds (CPU tests)")
    parser.add_argument("--out", type=Path, default=ROOT / "gpu-out")
    parser.add_argument("--deadline", type=float, default=480.0, help="seconds for everything")
    parser.add_argument("--headline-seconds", type=float, help="the headline's training budget (150; --tiny: 5)")
    parser.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=SECTIONS)
    parser.add_argument("--env-sizes", type=int, nargs="+", default=[4096, 16384, 65536],
                        help="the env section's env counts")
    parser.add_argument("--agents", type=int, nargs="+", default=[1, 4, 16, 64, 256], help="ppo section's populations")
    parser.add_argument("--section", choices=SECTIONS, help=argparse.SUPPRESS)
    parser.add_argument("--record", type=Path, help="record a device run's OUT folder in docs/benchmarks.md")
    parser.add_argument("--cpu", type=Path, help="with --record: the same sections run here on the CPU, for ratios")
    raw = parser.parse_args()
    if raw.record is not None:
        from benchmarks.perf.gpu_report import record_run

        record_run(raw.record, raw.cpu)
        return
    raw.out.mkdir(parents=True, exist_ok=True)
    headline = raw.headline_seconds or (5.0 if raw.tiny else 150.0)
    args = Args(raw.device, raw.tiny, raw.out, time.monotonic() + raw.deadline, headline, raw.section,
                tuple(raw.env_sizes), tuple(raw.agents))
    if raw.section:
        run_section(args)
        return
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    done = orchestrate(args, raw.sections)
    print(json.dumps({name: result.get("ok") for name, result in done.items()}))


if __name__ == "__main__":
    main()
