"""Benchmark of the data layer: ingest + validate + features (docs/data.md).

Each scenario runs in a fresh subprocess (so its peak RSS is its own) on the embedded
synthetic market, and reports wall time per stage, rows/s and peak memory. The table is
printed and becomes the latest reading of the data section of docs/benchmarks.md, with
the command that reproduces it and one row of its history.

    .venv/bin/python -m benchmarks.perf.data                     # daily and minute (1 year)
    .venv/bin/python -m benchmarks.perf.data --scenario paper    # 100 symbols x 10 years of minutes (~10 CPU-min)
    .venv/bin/python -m benchmarks.perf.data --scenario daily --scenario minute --scenario paper
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import ROOT, Reading, commit, now, record

SCENARIOS = {
    "daily": ["data.symbols=30", "data.freq=1d", "data.start=2016-01-01", "data.end=2023-12-31"],
    "minute": ["data.symbols=100", "data.freq=1min", "data.start=2023-01-01", "data.end=2023-12-31",
               "features.train_end=2023-08-31", "features.val_end=2023-10-31",
               "features.turbulence_refresh=390", "validation.max_gap_bars=30"],
    "paper": ["data.symbols=100", "data.freq=1min", "data.start=2014-01-01", "data.end=2023-12-31",
              "features.train_end=2021-12-31", "features.val_end=2022-12-31",
              "features.turbulence_refresh=390", "validation.max_gap_bars=30"],
}
"""``paper``: the paper's scale (finrl-podracer §5), NASDAQ-100-sized x 10 years of minute bars, ~98 M rows."""
DEFAULT = ("daily", "minute")
TARGET = ("minute: <= 120 s end to end and <= 4 GiB peak; paper: <= 10 min and <= 8 GiB peak "
          "(aim 5 min and 4 GiB); on 2 cores")


def run_scenario(name: str, workdir: Path) -> dict[str, float]:
    """Run the three stages in this process and measure them (called in a subprocess)."""
    os.chdir(workdir)
    from tasks.config import load_params
    from tasks.data.features import features
    from tasks.data.ingest import ingest
    from tasks.data.validate import validate

    params = load_params(ROOT / "params.yaml", [*SCENARIOS[name], f"data_dir={workdir / 'data'}"])
    out: dict[str, float] = {}
    total = time.perf_counter()
    for stage in (ingest, validate, features):
        reset_peak()
        start = time.perf_counter()
        result = stage(params)
        out[f"{stage.__name__}_s"] = time.perf_counter() - start
        out[f"{stage.__name__}_gib"] = peak_gib()
        if stage is ingest:
            out["rows"] = float(result.rows)
    out["total_s"] = time.perf_counter() - total
    out["peak_rss_gib"] = max(out[f"{s}_gib"] for s in ("ingest", "validate", "features"))
    return out


def reset_peak() -> None:
    """Start a stage's peak RSS from its current RSS (Linux: ``/proc/self/clear_refs``)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def peak_gib() -> float:
    """Peak RSS since :func:`reset_peak` (``VmHWM``), else of the whole process."""
    try:
        status = Path("/proc/self/status").read_text()
        return int(status.split("VmHWM:")[1].split()[0]) / 2**20
    except (OSError, IndexError, ValueError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def measure(name: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run([sys.executable, "-m", "benchmarks.perf.data", "--child", name, tmp], cwd=ROOT,
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{name} failed:\n{done.stderr[-3000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])


def table(results: dict[str, dict[str, float]]) -> str:
    lines = ["| scenario | rows | ingest s | validate s | features s | total s | rows/s | peak RSS GiB "
             "| peak per stage GiB (ingest / validate / features) |", "|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        lines.append(f"| {name} | {r['rows']:,.0f} | {r['ingest_s']:.1f} | {r['validate_s']:.1f} | "
                     f"{r['features_s']:.1f} | {r['total_s']:.1f} | {r['rows'] / r['total_s']:,.0f} | "
                     f"{r['peak_rss_gib']:.2f} | {r['ingest_gib']:.2f} / {r['validate_gib']:.2f} / "
                     f"{r['features_gib']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS),
                        help=f"run this scenario (repeatable; default: {' and '.join(DEFAULT)})")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_scenario(args.child[0], Path(args.child[1]))))
        return
    names = list(dict.fromkeys(args.scenario or DEFAULT))
    results = {name: measure(name) for name in names}
    text = table(results)
    print(text)
    command = "make install && .venv/bin/python -m benchmarks.perf.data" + "".join(
        f" --scenario {n}" for n in args.scenario or ())
    stamp = now()
    summary = {name: f"{r['total_s']:.1f} s, {r['peak_rss_gib']:.2f} GiB" for name, r in results.items()}
    record(Reading(
        "data", "Data layer: ingest + validate + features",
        f"Command: `{command}`  \nMachine: {os.cpu_count()} CPUs, {platform.machine()}, "
        f"Python {platform.python_version()}. Target: {TARGET}.\n\n{text}",
        ("date", "commit", "command", *(f"{name}: total, peak RSS" for name in SCENARIOS)),
        (stamp, commit(), f"`{command}`", *(summary.get(name, "-") for name in SCENARIOS))))


if __name__ == "__main__":
    main()
