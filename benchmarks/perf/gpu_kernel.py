"""The update kernel's builds for an H100, compiled here with no GPU (docs/training.md, the update
in one kernel): for each build of :data:`trainers.ppo.kernel.LAUNCHES`, at the headline's model
(100 stocks, 3 features, a 501-float state, hidden layers of 8), what ptxas reports (registers a
thread, spills, shared memory), and the instructions one sample costs, counted in the machine code
(SASS) the compiler made. Those bound the kernel's rate from above: an H100 issues at most one
instruction a cycle from each of a multiprocessor's four warp schedulers, so however its memory
behaves, the kernel cannot update faster than ``SMs × 4 × clock / instructions a sample``. That
ceiling is set beside the bandwidth roofline of the update's necessary bytes, whose 10% is the
update's target (docs/training.md; benchmarks/perf/gpu_update.py measures the rate on a device).

The count reads each loop of the SASS once per trip: the block loop's four inner loops are the
account value and the scorer (``ceil(stocks / launch.stocks)`` trips each) and the critic's
forward and backward (``ceil(state / launch.chunk)`` each). Branches inside a loop body are
predicated, so a body's instructions all issue; a software pipeline's prologue, outside the inner
loops, counts once a block.

    .venv/bin/python -m benchmarks.perf.gpu_kernel    # about 20 s; records its section of docs/benchmarks.md

Triton's compiler and its ptxas and nvdisasm (in its wheel) run here; a process whose Triton
runs kernels in its interpreter compiles nothing, so the builds compile in a child process.
The GPU machine's PyTorch 2.11 pins another Triton than ``.venv``'s, and the count depends on
the compiler, so ``--triton DIR`` compiles every build again with the Triton installed in
``DIR``, beside ``.venv``'s:

    .venv/bin/python -m pip install --no-deps --target .triton/3.6.0 triton==3.6.0
    .venv/bin/python -m benchmarks.perf.gpu_kernel --triton .triton/3.6.0
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.perf.gpu_common import necessary_update_bytes  # torch, no Triton

ROOT = Path(__file__).resolve().parents[2]
MODEL = {"stocks": 100, "features": 3, "state": 501, "hidden": 8, "critic_hidden": 8}
"""The headline's model (benchmarks/perf/gpu_common.py::paper_ppo on the minute market)."""
H100 = {"sms": 132, "boost_ghz": 1.98, "schedulers": 4}
"""An H100 SXM's multiprocessors and boost clock (data sheet: 67 FP32 TFLOP/s = 132 × 128 × 2 ×
1.98 GHz), and warp schedulers a multiprocessor."""
NECESSARY = necessary_update_bytes(MODEL["stocks"], MODEL["state"], per_action=True)
"""Bytes an update must move a sample-epoch at :data:`MODEL` (per-stock credit, the headline's)."""
RECORDED = ROOT / "docs" / "results" / "gpu-h100" / "device.json"
"""The H100's measured copy bandwidth (the device script's ``device`` section)."""
_INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/")
_LABEL = re.compile(r"^\.(L_x_\d+):")
_BRANCH = re.compile(r"BRA `\(\.(L_x_\d+)\)")


def loops(sass: str) -> list[tuple[int, int]]:
    """Each loop of ``sass`` (nvdisasm's text) as its first and last instruction's index: a
    branch back to a label above it."""
    labels: dict[str, int] = {}
    count, found = 0, []
    for line in sass.splitlines():
        label = _LABEL.match(line)
        if label:
            labels[label.group(1)] = count
        if _INSTRUCTION.search(line):
            branch = _BRANCH.search(line)
            if branch and labels.get(branch.group(1), count) < count:
                found.append((labels[branch.group(1)], count))
            count += 1
    return found


def per_block(sass: str, trips: tuple[int, ...]) -> int | None:
    """Instructions a warp issues for one block of samples: the longest loop (over blocks) once,
    each loop directly inside it ``trips`` times in order; None where the loops inside are not
    as many as ``trips``."""
    found = loops(sass)
    if not found:
        return None
    outer = max(found, key=lambda loop: loop[1] - loop[0])
    inside = [loop for loop in found if loop != outer and outer[0] <= loop[0] and loop[1] <= outer[1]]
    top = sorted(loop for loop in inside if not any(o != loop and o[0] <= loop[0] and loop[1] <= o[1] for o in inside))
    if len(top) != len(trips):
        return None
    sizes = [b - a + 1 for a, b in top]
    return outer[1] - outer[0] + 1 - sum(sizes) + sum(size * n for size, n in zip(sizes, trips))


def trips(launch: Any) -> tuple[int, ...]:
    """Trips of the block loop's four inner loops at :data:`MODEL` for a build: the account value's
    and the scorer's over the stocks, the critic's forward and backward over the state."""
    return (math.ceil(MODEL["stocks"] / launch.stocks),) * 2 + (math.ceil(MODEL["state"] / launch.chunk),) * 2


def per_sample(sass: str, launch: Any) -> float | None:
    """Warp-instructions a sample: a block's (:func:`per_block`), for each of the build's warps,
    over the block's samples."""
    block = per_block(sass, trips(launch))
    return None if block is None else block * launch.warps / launch.block


def _ptxas(ptx: str, tools: Path, folder: Path) -> dict[str, int]:
    """Registers a thread and bytes of spill stores and loads, as ``ptxas -v`` reports them."""
    (folder / "k.ptx").write_text(ptx)
    done = subprocess.run([str(tools / "ptxas"), "-v", "--gpu-name=sm_90a", str(folder / "k.ptx"), "-o",
                           str(folder / "k.o")], capture_output=True, text=True, check=True)
    return {key: int(m.group(1)) for key, pattern in (("registers", r"Used (\d+) registers"),
                                                      ("spill_stores", r"(\d+) bytes spill stores"),
                                                      ("spill_loads", r"(\d+) bytes spill loads"))
            if (m := re.search(pattern, done.stderr))}


def build_stats(launches: Sequence[Any] | None = None) -> list[dict[str, Any]]:
    """Each build of the kernel (``launches``, or all of :data:`trainers.ppo.kernel.LAUNCHES`)
    compiled for sm_90 at :data:`MODEL`: ptxas's report, whether it runs on the tensor cores, and
    the warp-instructions a sample (:func:`per_block`). In a process whose Triton compiles (not
    interprets)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from trainers.ppo import kernel

    assert not kernel._interpreted(), "Triton's interpreter is on: run this in a process without TRITON_INTERPRET"
    tools = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    fn = kernel._kernel
    sig = {name: "*fp32" for name in fn.arg_names} | {"idx": "*i64", "B": "i32", "cash_scale": "fp32",
                                                      "shares_scale": "fp32", "value_coef": "fp32"}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for launch in kernel.LAUNCHES if launches is None else launches:
            const = kernel.constants(**MODEL, programs=kernel.PROGRAMS, launch=launch)
            src = ASTSource(fn, sig | {name: "constexpr" for name in const},
                            constexprs={(fn.arg_names.index(k),): v for k, v in const.items()})
            built = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                                   options={"num_warps": launch.warps, "num_stages": launch.stages})
            (Path(tmp) / "k.cubin").write_bytes(built.asm["cubin"])
            sass = subprocess.run([str(tools / "nvdisasm"), "-c", str(Path(tmp) / "k.cubin")], capture_output=True,
                                  text=True, check=True).stdout
            stats = _ptxas(built.asm["ptx"], tools, Path(tmp))
            rows.append({"triton": triton.__version__} | launch._asdict() | stats | {
                "shared_bytes": built.metadata.shared, "tensor_core": "HMMA" in sass,
                "per_sample": per_sample(sass, launch)})
    return rows


def ceiling(per_sample: float, copy_gbs: float) -> tuple[float, float]:
    """The most sample-epochs/s an H100 can issue at ``per_sample`` warp-instructions each, and
    that rate's share of the bandwidth roofline of the necessary bytes at ``copy_gbs``."""
    rate = H100["sms"] * H100["schedulers"] * H100["boost_ghz"] * 1e9 / per_sample
    return rate, rate * NECESSARY / (copy_gbs * 1e9)


BUILD = ("warps", "dot", "stages", "block", "stocks", "chunk")
"""What makes a build, whatever compiled it."""


def table(rows: list[dict[str, Any]], copy_gbs: float) -> str:
    """One row a build, its figures under each Triton side by side (``3.7.1 · 3.6.0``), in the
    order the rows came."""
    versions = list(dict.fromkeys(r["triton"] for r in rows))
    builds: dict[tuple[Any, ...], dict[str, dict[str, Any]]] = {}
    for r in rows:
        builds.setdefault(tuple(r[k] for k in BUILD), {})[r["triton"]] = r

    def cells(by_version: dict[str, dict[str, Any]]) -> list[str]:
        figures = [_figures(by_version[v], copy_gbs) if v in by_version else ["-"] * 6 for v in versions]
        return [" · ".join(column) for column in zip(*figures)]

    lines = ["| warps | matmuls | stages | samples × stocks, state entries at a time | registers "
             "| spills, bytes (stores / loads) | shared memory, KB | warp-instructions a sample "
             "| issue ceiling, M sample-epochs/s | ceiling / copy roofline |",
             "|---:|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for (warps, dot, stages, block, stocks, chunk), by_version in builds.items():
        lines.append(f"| {warps} | {dot} | {stages} | {block} × {stocks}, {chunk} | " + " | ".join(cells(by_version))
                     + " |")
    return f"Each figure for Triton {' · '.join(versions)}.\n\n" + "\n".join(lines)


def _figures(r: dict[str, Any], copy_gbs: float) -> list[str]:
    """One compile's registers, spills, shared memory, instructions a sample and their ceiling."""
    if r["per_sample"] is None:
        per = rate = share = "-"
    else:
        top, part = ceiling(r["per_sample"], copy_gbs)
        per, rate, share = f"{r['per_sample']:,.0f}", f"{top / 1e6:,.0f}", f"{part:.0%}"
    return [str(r.get("registers", "-")), f"{r.get('spill_stores', '-')} / {r.get('spill_loads', '-')}",
            f"{r['shared_bytes'] / 1024:.0f}", per, rate, share]


def measure(triton: Path | None = None) -> list[dict[str, Any]]:
    """:func:`build_stats` in a child process with Triton's interpreter off; with the Triton
    installed in folder ``triton`` where one is given, else ``.venv``'s."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"CUDA_VISIBLE_DEVICES": ""}
    if triton is not None:
        if not (triton / "triton" / "__init__.py").exists():
            raise SystemExit(f"--triton {triton}: no Triton installed there (pip install --no-deps --target "
                             f"{triton} triton==VERSION)")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(triton.resolve()), env.get("PYTHONPATH")) if p)
    done = subprocess.run([sys.executable, "-m", "benchmarks.perf.gpu_kernel", "--child"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"compiling the kernel's builds failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--triton", type=Path, action="append", default=[], metavar="DIR",
                        help="also compile with the Triton installed in DIR (pip install --target DIR)")
    args = parser.parse_args()
    if args.child:
        import triton  # noqa: F401 - first, with the interpreter off, before trainers.ppo.kernel would set it

        print(json.dumps(build_stats()))
        return
    from benchmarks.common import Reading, commit, now, record

    rows = [row for triton in [None, *args.triton] for row in measure(triton)]
    copy_gbs = json.loads(RECORDED.read_text())["copy_gbs"]
    text = table(rows, copy_gbs)
    print(text)
    best = min((r for r in rows if r["per_sample"] is not None), key=lambda r: r["per_sample"])
    rate, share = ceiling(best["per_sample"], copy_gbs)
    command = " ".join([".venv/bin/python -m benchmarks.perf.gpu_kernel", *(f"--triton {d}" for d in args.triton)])
    latest = (f"`{command}` (compiled here for an H100, sm_90, by Triton's own compiler and ptxas, of each "
              f"row's Triton; no GPU). Each build of the update kernel at the headline's model; its "
              f"instructions a sample counted in its SASS, and the ceiling those put on its rate at the H100's "
              f"{H100['sms']} multiprocessors × {H100['schedulers']} warp schedulers × {H100['boost_ghz']} GHz; "
              f"against the bandwidth roofline of the update's {NECESSARY:,} necessary bytes a sample-epoch at "
              f"the copy rate measured on the H100 ({copy_gbs:,.0f} GB/s). A ceiling, not a rate: memory latency "
              f"and stalls come below it (docs/training.md, the update in one kernel).\n\n{text}")
    record(Reading("kernel-builds", "The update kernel's builds for an H100: benchmarks/perf/gpu_kernel.py", latest,
                   ("date", "commit", "builds", "fewest warp-instructions a sample", "its build",
                    "its issue ceiling, M sample-epochs/s", "ceiling / copy roofline"),
                   (now(), commit(), str(len(rows)), f"{best['per_sample']:,.0f}",
                    f"{best['warps']} warps {best['dot']} {best['stages']} stages {best['block']} × "
                    f"{best['stocks']}, {best['chunk']}, Triton {best['triton']}",
                    f"{rate / 1e6:,.0f}", f"{share:.0%}")))


if __name__ == "__main__":
    main()
