"""The gate's paired test at the paper's scale: a year of minute bars (docs/operations.md, the gate).

One paired test (``tasks/registry/evidence.py::paired_test``, params.yaml's ``registry``: 2,000
resamples) of a model against buy-and-hold over 252 × 390 = 98,280 minute bars, each run in a
fresh subprocess so that its peak RSS is its own:

- **chunked**: the shipped test, which draws its resamples a chunk at a time;
- **one array**: the same test with every resample held at once (the chunk made as large as
  all of them), as the test ran before; its verdict must be the chunked one's bit for bit;
- **watch look**: one look of the champion's live watch (``tasks/registry/decay.py::watch``,
  params.yaml's ``watch``) at a year of minute bars since its promotion, the pair as its record
  and its promise read from the same pair: what each trading cycle adds (docs/operations.md,
  the watch).

The pair is a seeded simulation: buy-and-hold's minute returns with GARCH-free fat tails, and
a model that is it plus a small persistent active return. Targets: at most 5 s and 1 GiB.

    .venv/bin/python -m benchmarks.perf.gate_stats
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

from benchmarks.common import ROOT, Reading, commit, now, record
from benchmarks.perf.data import peak_gib, reset_peak

BARS = 252 * 390
MODES = {"chunked": None, "one array": 1 << 62}
"""Each mode's ``CHUNK_CELLS``: the shipped one, or large enough for every resample at once."""
TARGET = "at most 5 s and 1 GiB for a year of minute bars (98,280), 2,000 resamples, on 2 cores"
LOOK = "watch look"


def pair(bars: int = BARS, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Buy-and-hold's per-bar returns and a model's: it plus an AR(1) active return with a small edge."""
    rng = np.random.default_rng(seed)
    market = rng.standard_t(4, bars) * 4e-4
    active = np.empty(bars)
    shocks = rng.normal(2e-6, 1e-4, bars)
    active[0] = shocks[0]
    for t in range(1, bars):
        active[t] = 0.2 * active[t - 1] + shocks[t]
    return market + active, market


def look() -> dict[str, object]:
    """One look of the live watch at the pair, in this process: seconds, peak GiB, its line."""
    from tasks.config import load_params
    from tasks.registry.decay import Promise, watch

    cfg = load_params(ROOT / "params.yaml").watch
    model, bench = pair()
    reset_peak()
    started = time.perf_counter()
    w = watch(model, bench, Promise.of(model, bench), tolerance=cfg.tolerance, years=cfg.years,
              per_year=252 * 390.0, alpha=cfg.alpha)
    return {"seconds": time.perf_counter() - started, "peak_gib": peak_gib(), "evidence": w.line, "line": w.line}


def run(mode: str) -> dict[str, object]:
    """One paired test in this process (a subprocess of :func:`main`): seconds, peak GiB, the evidence."""
    from tasks.config import load_params
    from tasks.registry import evidence

    if mode == LOOK:
        return look()
    if MODES[mode] is not None:
        evidence.CHUNK_CELLS = MODES[mode]
    registry = load_params(ROOT / "params.yaml").registry
    model, bench = pair()
    reset_peak()
    started = time.perf_counter()
    e = evidence.paired_test(model, bench, "buy_and_hold", per_year=252 * 390.0, margin=registry.gate_margin,
                             alpha=registry.gate_alpha, resamples=registry.gate_resamples, seed=registry.gate_seed)
    return {"seconds": time.perf_counter() - started, "peak_gib": peak_gib(), "evidence": repr(e),
            "line": e.summary()}


def measure(mode: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-m", "benchmarks.perf.gate_stats", "--child", mode], cwd=ROOT,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{mode} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", choices=[*sorted(MODES), LOOK], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run(args.child)))
        return
    results = {mode: measure(mode) for mode in [*MODES, LOOK]}
    same = results["chunked"]["evidence"] == results["one array"]["evidence"]
    lines = ["| mode | seconds | peak RSS GiB |", "|---|---|---|"]
    lines += [f"| {mode} | {r['seconds']:.3f} | {r['peak_gib']:.2f} |" for mode, r in results.items()]
    text = "\n".join(lines) + (f"\n\nVerdict ({'bit for bit the same in both' if same else 'DIFFERENT'}): "
                               f"{results['chunked']['line']}\n\nThe watch's look: {results[LOOK]['line']}")
    print(text)
    if not same:
        raise SystemExit("the chunked test's evidence differs from the one-array test's")
    command = "make install && .venv/bin/python -m benchmarks.perf.gate_stats"
    chunked = results["chunked"]
    record(Reading(
        "gate-stats", "The gate's paired test on a year of minute bars",
        f"Command: `{command}`  \nMachine: {os.cpu_count()} CPUs, {platform.machine()}, Python "
        f"{platform.python_version()}. Target: {TARGET}.\n\n{text}",
        ("date", "commit", "command", "chunked: s, GiB", "one array: s, GiB", "same verdict", "watch look: s, GiB"),
        (now(), commit(), f"`{command}`", f"{chunked['seconds']:.1f} s, {chunked['peak_gib']:.2f} GiB",
         f"{results['one array']['seconds']:.1f} s, {results['one array']['peak_gib']:.2f} GiB", str(same),
         f"{results[LOOK]['seconds'] * 1e3:.1f} ms, {results[LOOK]['peak_gib']:.2f} GiB")))


if __name__ == "__main__":
    main()
