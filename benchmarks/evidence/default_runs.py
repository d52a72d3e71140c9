"""How often the default run promotes (docs/results.md, the gate): ``podracer run`` as shipped,
each seed in a project folder of its own, with ``data.seed`` and ``evolution.seed`` = the seed.

The run's summary prints the gate's verdict line; this collects it, with the run's exit
status, into a JSON file and a table. The null market (``--null``) is the same with
``data.signal: 0``, where nothing should be promoted.

    .venv/bin/python -m benchmarks.evidence.default_runs --seeds 400-409 --json docs/results/default-runs.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import ROOT, seeds_of

GATE = re.compile(r"^gate (promoted|enters shadow|refused): (.*)$", re.MULTILINE)
P_VALUE = re.compile(r"p (\d\.\d{3}) [<≥] α")


def run_seed(seed: int, null: bool, code: Path) -> dict[str, object]:
    """One ``podracer run`` in a fresh folder; the verdict its summary printed."""
    overrides = ["-s", f"data.seed={seed}", "-s", f"evolution.seed={seed}"] + (["-s", "data.signal=0"] if null else [])
    with tempfile.TemporaryDirectory(prefix=f"default-run-{seed}-") as tmp:
        shutil.copy2(ROOT / "params.yaml", Path(tmp) / "params.yaml")
        env = {"PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "600",  # a loaded machine starts it slowly
               **os.environ, "PYTHONPATH": str(code), "COLUMNS": "200"}
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "flows.cli", "run", *overrides], cwd=tmp, env=env,
                              capture_output=True, text=True)
        seconds = time.monotonic() - started
    found = GATE.search(done.stdout)
    p_value = P_VALUE.search(found.group(2)) if found else None
    return {"seed": seed, "market": "null" if null else "learnable", "exit": done.returncode,
            "action": found.group(1) if found else "no verdict",
            "line": found.group(2) if found else (done.stdout + done.stderr)[-600:],
            "p_value": float(p_value.group(1)) if p_value else None, "seconds": round(seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="400-409")
    parser.add_argument("--null", action="store_true", help="data.signal: 0, the null market")
    parser.add_argument("--code", type=Path, default=ROOT, help="the source tree to run (default: this one)")
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    rows: list[dict[str, object]] = []
    for seed in seeds_of(args.seeds):
        rows.append(run_seed(seed, args.null, args.code))
        row = rows[-1]
        print(f"seed {seed}: {row['action']} (p {row['p_value']}) in {row['seconds']} s, exit {row['exit']}",
              flush=True)
        args.json.write_text(json.dumps({"command": " ".join(sys.argv), "rows": rows}, indent=1))
    promoted = sum(r["action"] == "promoted" for r in rows)
    print(f"\n| seeds | promoted | enters shadow | refused |\n|---:|---:|---:|---:|\n| {len(rows)} | {promoted} | "
          f"{sum(r['action'] == 'enters shadow' for r in rows)} | {sum(r['action'] == 'refused' for r in rows)} |")


if __name__ == "__main__":
    main()
