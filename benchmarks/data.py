"""Benchmark of the data layer: ingest + validate + features (docs/data.md).

Each scenario runs in a fresh subprocess (so its peak RSS is its own) on the embedded
synthetic market, and reports wall time per stage, rows/s and peak memory. The table is
printed and becomes the latest reading of the data section of docs/benchmarks.md, with
the command that reproduces it and one row of its history.

    .venv/bin/python benchmarks/data.py            # both scenarios
    .venv/bin/python benchmarks/data.py --only daily
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.record import Reading, now, record  # noqa: E402

SCENARIOS = {
    "daily": ["data.symbols=30", "data.freq=1d", "data.start=2016-01-01", "data.end=2023-12-31"],
    "minute": ["data.symbols=100", "data.freq=1min", "data.start=2023-01-01", "data.end=2023-12-31",
               "features.train_end=2023-08-31", "features.val_end=2023-10-31",
               "features.turbulence_refresh=390", "validation.max_gap_bars=30"],
}
TARGET = "minute: <= 120 s end to end and <= 4 GiB peak on 2 cores"


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
        start = time.perf_counter()
        result = stage(params)
        out[f"{stage.__name__}_s"] = time.perf_counter() - start
        if stage is ingest:
            out["rows"] = float(result.rows)
    out["total_s"] = time.perf_counter() - total
    out["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    return out


def measure(name: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run([sys.executable, __file__, "--child", name, tmp], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{name} failed:\n{done.stderr[-3000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])


def table(results: dict[str, dict[str, float]]) -> str:
    lines = ["| scenario | rows | ingest s | validate s | features s | total s | rows/s | peak RSS GiB |",
             "|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        lines.append(f"| {name} | {r['rows']:,.0f} | {r['ingest_s']:.1f} | {r['validate_s']:.1f} | "
                     f"{r['features_s']:.1f} | {r['total_s']:.1f} | {r['rows'] / r['total_s']:,.0f} | "
                     f"{r['peak_rss_gib']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(SCENARIOS))
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_scenario(args.child[0], Path(args.child[1]))))
        return
    names = [args.only] if args.only else list(SCENARIOS)
    results = {name: measure(name) for name in names}
    text = table(results)
    print(text)
    command = "make install && .venv/bin/python benchmarks/data.py" + (f" --only {args.only}" if args.only else "")
    stamp = now()
    summary = {name: f"{r['total_s']:.1f} s, {r['peak_rss_gib']:.2f} GiB" for name, r in results.items()}
    record(Reading(
        "data", "Data layer: ingest + validate + features",
        f"Latest: {stamp}. Command: `{command}`  \nMachine: {os.cpu_count()} CPUs, {platform.machine()}, "
        f"Python {platform.python_version()}. Target: {TARGET}.\n\n{text}",
        ("date", "command", "daily: total, peak RSS", "minute: total, peak RSS"),
        (stamp, f"`{command}`", summary.get("daily", "-"), summary.get("minute", "-"))))


if __name__ == "__main__":
    main()
