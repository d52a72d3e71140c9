"""``podracer broker`` as a process, for ``benchmarks/perf/broker.py``: stopping a child by its PID,
the CLI's start time (part 3: spawn until ``GET /v2/clock`` answers 200, a fresh ledger each
time) and, when that misses its target, where the start's import time goes
(``python -X importtime``)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT
from standins.postgres import free_port


def stop(child: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after 15 s: by PID, this script's own child only."""
    if child.poll() is None:
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(timeout=15)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()



def start_times(folder: Path, bars: Path, repeats: int) -> list[dict[str, float]]:
    """Seconds from spawning ``podracer broker`` (a fresh ledger each time) until ``GET
    /v2/clock`` answers 200 (``total``), until its port first takes a connection
    (``listening``), and the first answer's own time (``answer``)."""
    import requests

    from tasks.delivery.keys import load_keys

    data = folder / "data"
    (data / "validated").mkdir(parents=True, exist_ok=True)
    shutil.copy(bars, data / "validated" / "bars.parquet")
    (folder / "params.yaml").write_text(f"data_dir: {data}\n")
    keys = load_keys(data / "broker" / "keys.json", create=True, env={})  # the file the broker reads
    headers = keys.headers()
    cli = Path(sys.executable).parent / "podracer"
    env = {k: v for k, v in os.environ.items() if not k.startswith("APCA_")}
    out = []
    for _ in range(repeats):
        for stale in ("broker.db", "broker.db-wal", "broker.db-shm"):
            (data / "broker" / stale).unlink(missing_ok=True)
        port = free_port()
        began = time.perf_counter()
        child = subprocess.Popen([str(cli), "broker", "-p", str(folder / "params.yaml"), "--port", str(port)],
                                 cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            while True:
                if child.poll() is not None:
                    raise SystemExit(f"podracer broker exited with {child.returncode}: "
                                     f"{child.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
                sent = time.perf_counter()
                try:
                    status = requests.get(f"http://127.0.0.1:{port}/v2/clock", headers=headers, timeout=30).status_code
                except requests.ConnectionError:
                    status = None
                if status == 200:
                    done = time.perf_counter()
                    out.append({"total": done - began, "listening": sent - began, "answer": done - sent})
                    break
                if time.perf_counter() - began > 120:
                    raise SystemExit(f"podracer broker did not answer 200 within 120 s (last status {status})")
                time.sleep(0.02)
        finally:
            stop(child)
    return out


def import_profile(modules: str = "flows.cli, tasks.delivery.broker.service") -> dict[str, Any]:
    """``python -X importtime -c 'import MODULES'``: the total, and the heaviest third-party
    packages the project imports (cumulative seconds at their first import, their own
    dependencies included) with the project module that imports each."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {modules}"], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    stack: list[tuple[int, str]] = []
    found: dict[str, tuple[float, str]] = {}
    total = 0.0
    for line in reversed([x for x in done.stderr.splitlines() if x.startswith("import time:") and "|" in x][1:]):
        _, cumulative, name = line.split("|")
        depth = (len(name) - len(name.lstrip()) - 1) // 2
        name = name.strip()
        while stack and stack[-1][0] >= depth:
            stack.pop()
        stack.append((depth, name))
        if depth == 0:
            total += int(cumulative) / 1e6
        ours = [n.split(".")[0] in ("flows", "tasks", "trainers") for _, n in stack[:-1]]
        package = name.split(".")[0]
        if all(ours) and not package.startswith("_") and package not in ("flows", "tasks", "trainers"):
            seconds, via = found.get(package, (0.0, stack[-2][1] if len(stack) > 1 else ""))
            found[package] = (seconds + int(cumulative) / 1e6, via)  # a package the project itself imports
    heavy = sorted(((s, n, v) for n, (s, v) in found.items() if s >= 0.1), reverse=True)[:6]
    return {"total": total, "heavy": heavy}
