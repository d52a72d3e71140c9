"""Training throughput on minute bars against daily bars, side by side (docs/training.md,
Minute bars: the MDP).

For each number of symbols, the same training config (``params.yaml``, ``--generations``
generations) trains in this process on daily features and on minute features, both built
by our ingest/validate/features stages in a temp folder from the embedded market (daily:
2016–2023; minute: 2023-09-01..2023-10-31, ``features.turbulence_refresh`` 390). Each
run is profiled (``trainers/profiler.py``, as ``podracer train --profile``) so the table says
where the time goes, in µs of each operation per env step. The target: minute env steps/s
within 2x of daily at the same number of symbols. The tables are printed and recorded in
docs/benchmarks-archive.md (this benchmark's section).

    .venv/bin/python -m benchmarks.archive.train_freq                  # 10 and 100 symbols, about 4 minutes
    .venv/bin/python -m benchmarks.archive.train_freq --symbols 10     # a quicker run
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from benchmarks.common import ARCHIVE, ROOT, Reading, build_features, commit, now, record
from tasks.config import Params, load_params
from tasks.model import train
from tasks.model.plan import state_scales
from trainers import profiler
from trainers.algorithms import ALGORITHMS, DEFAULT_LEARNER
from trainers.population.evolution import EvolutionResult

FREQS = {
    "daily": ["data.freq=1d"],
    "minute": ["data.freq=1min", "data.start=2023-09-01", "data.end=2023-10-31", "features.turbulence_refresh=390"],
}
TARGET = "minute env steps/s within 2x of daily at the same number of symbols (2 CPU cores)"


@dataclass(frozen=True)
class Run:
    """One profiled training run."""

    bars: int
    env_steps: int
    seconds: float  # the profiled region, overhead-corrected
    cpu_seconds: float  # this process's CPU time over the run
    per_step_us: dict[str, float]  # "phase / operation" -> µs per env step

    @property
    def rate(self) -> float:
        return self.env_steps / self.seconds

    @property
    def cpu_rate(self) -> float:
        return self.env_steps / self.cpu_seconds


def build(workdir: Path, symbols: int, freq: str, generations: int) -> Params:
    """Params of one scenario, with its features built by stages 1–3 under ``workdir``."""
    params = load_params(ROOT / "params.yaml", [*FREQS[freq], f"data.symbols={symbols}",
                                                f"evolution.generations={generations}", f"data_dir={workdir}"])
    build_features(params)
    return params


def profiled_run(params: Params, checkpoints: Path) -> Run:
    """Train as ``podracer train --profile`` does (same run, engine, windows and profiler)."""
    from tasks.data import feature_set

    fs = feature_set.load(params.dirs.features)
    torch.manual_seed(params.evolution.seed)
    data = fs.market("cpu")
    run = train.new_run(params, fs, data, state_scales(params, fs))
    iteration = ALGORITHMS[DEFAULT_LEARNER].iteration(run.setting, params.evolution.seed)  # the profiler's calibration
    cpu: list[float] = []

    def timed() -> EvolutionResult:
        start = time.process_time()
        result = train.execute(run, params, lambda gen, job, fitness: None, checkpoints)
        cpu.append(time.process_time() - start)
        return result

    result, report = profiler.profiled(timed, iteration)
    steps = result.cost.env_steps
    per_step = {f"{r.phase} / {r.operation}": r.seconds / steps * 1e6 for r in report.rows}
    return Run(len(fs.timestamps), steps, report.total_seconds, cpu[0], per_step)


def tables(runs: dict[tuple[int, str], Run]) -> str:
    counts = sorted({n for n, _ in runs})
    lines = ["| symbols | daily bars | minute bars | env steps | daily env steps/s | minute env steps/s | "
             "daily / minute | per CPU-second: daily / minute |", "|---|---|---|---|---|---|---|---|"]
    for n in counts:
        d, m = runs[n, "daily"], runs[n, "minute"]
        lines.append(f"| {n} | {d.bars:,} | {m.bars:,} | {d.env_steps:,} / {m.env_steps:,} | {d.rate:,.0f} | "
                     f"{m.rate:,.0f} | {d.rate / m.rate:.2f}x | {d.cpu_rate / m.cpu_rate:.2f}x |")
    ops = list(dict.fromkeys(op for run in runs.values() for op in run.per_step_us))
    head = " | ".join(f"{n} {f}" for n in counts for f in ("daily", "minute"))
    lines += ["", "Where the time goes, µs per env step (profiler, overhead-corrected):", "",
              f"| phase / operation | {head} |", "|---|" + "---|" * (2 * len(counts))]
    for op in ops:
        cells = " | ".join(f"{runs[n, f].per_step_us.get(op, 0.0):.1f}" for n in counts for f in ("daily", "minute"))
        lines.append(f"| {op} | {cells} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--symbols", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--generations", type=int, default=2)
    args = parser.parse_args()
    runs: dict[tuple[int, str], Run] = {}
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.symbols:
            for freq in FREQS:
                folder = Path(tmp) / f"{freq}-{n}"
                params = build(folder / "data", n, freq, args.generations)
                runs[n, freq] = profiled_run(params, folder / "checkpoints")
                print(f"{n} symbols, {freq}: {runs[n, freq].rate:,.0f} env steps/s", flush=True)
    load = max(load, os.getloadavg()[0])
    text = tables(runs)
    print(text)
    command = ".venv/bin/python -m benchmarks.archive.train_freq" + \
        (f" --symbols {' '.join(map(str, args.symbols))}" if args.symbols != [10, 100] else "") + \
        (f" --generations {args.generations}" if args.generations != 2 else "")
    stamp = now()
    ratios = ", ".join(f"{n}: {runs[n, 'daily'].rate / runs[n, 'minute'].rate:.2f}x" for n in args.symbols)
    record(Reading(
        "train_freq", "Training throughput: minute bars vs daily bars",
        f"Command: `{command}`  \nMachine: {os.cpu_count()} CPUs, {platform.machine()}, torch "
        f"{torch.__version__}, {torch.get_num_threads()} threads, load average up to {load:.1f} during the run. "
        f"Config: params.yaml, {args.generations} generations. Target: {TARGET}.\n\n{text}",
        ("date", "commit", "command", "daily / minute env steps/s, by symbols"),
        (stamp, commit(), f"`{command}`", ratios)), ARCHIVE)


if __name__ == "__main__":
    main()
