"""Benchmark of the continuous-training loop as a user runs it: data event → CT cycle → champion → orders.

In a scratch project (temp folder or ``--workdir``; never the repo's data/ or mlflow/) with params.yaml's
config (``--params``: another shipped config, e.g. params.minute.yaml; ``--tiny``: the test suite's sizes) on
free loopback ports: ``podracer run`` (the first champion);
``podracer up`` and its services' seconds; ``podracer simulate --bars 5`` (the data event), then Prefect's
REST API: event → ct-cycle run, its task runs, the cycle (target ≤ 15 min); if it promoted, event → first
order at the paper broker; the ``champion`` alias moved through MLflow's REST API (``--repeats``) → first
order, or → the delivery in delivered.json when it places none (target ≤ 5 s); ``podracer down`` leaves
no process. Records the table in docs/benchmarks.md, the section's latest reading and a row of its history
(``--tiny``: only with ``--record``); another config than params.yaml keeps a section of its own.

    .venv/bin/python -m benchmarks.perf.cycle            # the default config, on a quiet machine
    .venv/bin/python -m benchmarks.perf.cycle --params params.minute.yaml   # the minute-bar config
    .venv/bin/python -m benchmarks.perf.cycle --tiny     # a few minutes: checks the script
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import requests
import yaml

from benchmarks.common import ROOT, Reading, commit, now, record
from deploy.local.processes import group_alive
from standins import tiny
from tasks.config import Params, load_params

TINY = [*tiny.TINY, "ct.eval_bars=20", "registry.gate_margin=-1000"]
"""``--tiny``: the test suite's sizes (standins/tiny.py), and what makes a quick CT cycle."""
CYCLE_S, ALIAS_S = 15 * 60.0, 5.0
TERMINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")
Row = tuple[str, str, str, str]  # measure, result, target, met


class Failed(Exception):
    """The loop did not do its part: reported, and the script exits non-zero."""


def row(measure: str, result: str, target: str = "", ok: bool | None = None) -> Row:
    return measure, result, target, "" if ok is None else "yes" if ok else "**no**"


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports on 127.0.0.1 that nothing listens on (port 0, bound together)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def scratch_params(root: Path, config: Path, tiny: bool, extra: list[str]) -> dict[str, Any]:
    """``config`` (params.yaml, or another shipped config) with the scratch project's data, store,
    artifacts and ports, then the overrides."""
    tree = yaml.safe_load(config.read_text())
    prefect, mlflow, receiver, broker, runner = free_ports(5)
    for assignment in [f"data_dir={root / 'data'}", f"registry.tracking_uri=sqlite:///{root / 'mlflow' / 'mlflow.db'}",
                       f"registry.artifact_root={root / 'mlflow' / 'artifacts'}", f"services.prefect_port={prefect}",
                       f"services.mlflow_port={mlflow}", f"services.receiver_port={receiver}",
                       f"services.runner_port={runner}",
                       f"broker.port={broker}", *(TINY if tiny else []), *extra]:
        key, _, value = assignment.partition("=")
        *parents, leaf = key.split(".")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(value)
    return tree


def service_seconds(said: str) -> dict[str, float]:
    """The ``<name> answers at URL (pid N, X s)`` lines of ``podracer up``, by name."""
    return {m[1]: float(m[2]) for m in re.finditer(r"(\w+) answers at \S+ \(pid \d+, ([\d.]+) s\)", said)}


def epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def task_seconds(runs: list[dict[str, Any]]) -> list[tuple[str, float]]:
    """Each finished task run's name (without Prefect's ``-N`` suffix) and seconds, in start order."""
    done = sorted((r for r in runs if r.get("start_time") and r.get("end_time")), key=lambda r: epoch(r["start_time"]))
    return [(r["name"].rsplit("-", 1)[0], epoch(r["end_time"]) - epoch(r["start_time"])) for r in done]


def until(what: str, check: Callable[[], Any], timeout: float) -> Any:
    """``check()``'s first true answer, asked every second; Failed after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (found := check()):
        if time.monotonic() > deadline:
            raise Failed(f"waited {timeout:.0f} s for {what}")
        time.sleep(1.0)
    return found


class Loop:
    """The scratch project's commands and services, reached as a user reaches them."""

    def __init__(self, root: Path, tree: dict[str, Any]) -> None:
        self.root, self.tree, self.model = root, tree, tree["registry"]["model_name"]
        self.api = f"http://127.0.0.1:{tree['services']['prefect_port']}/api"
        self.mlflow = f"http://127.0.0.1:{tree['services']['mlflow_port']}/api/2.0/mlflow"
        self.broker = f"http://127.0.0.1:{tree['broker']['port']}"

    def podracer(self, *args: str, timeout: float = 7200) -> tuple[float, str]:
        """One command in the project, as a user runs it: its seconds and its output, wraps undone."""
        env = {k: v for k, v in os.environ.items()
               if k not in ("PREFECT_API_URL", "MLFLOW_TRACKING_URI", "PODRACER_TRACKING_URI")}
        began = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "flows.cli", *args], check=False, cwd=self.root, text=True,
                              capture_output=True, timeout=timeout,
                              env={**env, "COLUMNS": "250", "PYTHONPATH": str(ROOT)})
        if done.returncode != 0:
            raise Failed(f"`podracer {' '.join(args)}` exited {done.returncode}: {(done.stdout + done.stderr)[-3000:]}")
        return time.monotonic() - began, " ".join(done.stdout.split())

    def runs(self, deployment: str, since: float) -> list[dict[str, Any]]:
        """The flow runs of ``deployment`` (flow/name), or of a flow (a name without ``/``: the
        runner's deliveries), created after ``since`` (epoch), oldest first."""
        if "/" in deployment:
            ident = requests.get(f"{self.api}/deployments/name/{deployment}", timeout=30).json()["id"]
            which = {"deployments": {"id": {"any_": [ident]}}}
        else:
            which = {"flows": {"name": {"any_": [deployment]}}}
        found = requests.post(f"{self.api}/flow_runs/filter", timeout=30, json=which).json()
        return sorted((r for r in found if epoch(r["created"]) > since), key=lambda r: epoch(r["created"]))

    def versions(self) -> set[int]:
        found = requests.get(f"{self.mlflow}/model-versions/search", params={"filter": f"name='{self.model}'"},
                             timeout=30).json().get("model_versions", [])
        return {int(v["version"]) for v in found}

    def champion(self) -> str | None:
        answer = requests.get(f"{self.mlflow}/registered-models/alias", timeout=30,
                              params={"name": self.model, "alias": "champion"})
        return answer.json()["model_version"]["version"] if answer.status_code == 200 else None

    def set_champion(self, version: str) -> None:
        answer = requests.post(f"{self.mlflow}/registered-models/alias", timeout=30,
                               json={"name": self.model, "alias": "champion", "version": version})
        if answer.status_code != 200:
            raise Failed(f"moving the champion alias to {version}: {answer.status_code} {answer.text[:300]}")

    def orders(self) -> set[str]:
        """The paper account's client order ids."""
        keys = json.loads((self.root / "data" / "broker" / "keys.json").read_text())
        return {o["client_order_id"] for o in requests.get(
            f"{self.broker}/v2/orders", params={"status": "all", "limit": 500}, timeout=30,
            headers={"APCA-API-KEY-ID": keys["key_id"], "APCA-API-SECRET-KEY": keys["secret_key"]}).json()}

    def delivery(self, version: str, since: float, timeout: float,
                 known: set[str] | None = None) -> tuple[float | None, float | None, int]:
        """Seconds from ``since`` (epoch) to ``version``'s first new order at the broker (polled every 0.2 s)
        and to its delivery in delivered.json (its ``at``), and that delivery's orders; None: not seen."""
        known = known if known is not None else self.orders()
        first: float | None = None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            record: dict[str, Any] = {}
            with contextlib.suppress(OSError, ValueError):
                record = json.loads((self.root / "data" / "broker" / "delivered.json").read_text())
            done = str(record.get("version")) == version and record.get("at", 0.0) > since
            if first is None and (not done or record["orders"]) and any(  # orders go out before the record
                    o.startswith(f"pdr-v{version}-") for o in self.orders() - known):
                first = time.time() - since
            if done:
                return first, record["at"] - since, int(record["orders"])
            time.sleep(0.2)
        return first, None, 0

    def stop(self, recorded: list[int]) -> list[Row]:
        """``podracer down``, then any process of the project still there, killed by process group."""
        try:
            seconds, said = self.podracer("down", timeout=600)
            stopped = len(re.findall(r"(?<!supervisor) stopped \(pid ", said))
            rows = [row(f"`podracer down` ({stopped} stopped)", f"{seconds:.1f} s")]
        except (Failed, subprocess.TimeoutExpired) as err:
            rows = [row("`podracer down`", f"**failed**: {str(err)[:200]}")]
        mine, pid = set(), os.getpid()
        while pid > 1:  # this script and what started it may name the scratch folder too
            mine.add(pid)
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        found = subprocess.run(["pgrep", "-f", str(self.root)], check=False, capture_output=True, text=True)
        names = []
        for pid in recorded:  # a service's process group: prefect's command line names no folder
            if group_alive(pid):
                names.append(f"group {pid}")
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
        for pid in sorted({int(p) for p in found.stdout.split()} - mine):
            with contextlib.suppress(OSError):
                names.append(f"{pid} `{Path(f'/proc/{pid}/cmdline').read_text().replace(chr(0), ' ')[:80]}`")
                group = os.getpgid(pid)
                os.killpg(group, signal.SIGKILL) if group != os.getpgrp() else os.kill(pid, signal.SIGKILL)
        return [*rows, row("processes of the scratch project left after `down`",
                           "killed: " + "; ".join(names) if names else "none", "none", not names)]


def measure(loop: Loop, rows: list[Row], repeats: int, wait: float, recorded: list[int]) -> None:
    run_s, said = loop.podracer("run")
    if (first := re.search(r"version (\d+) \(alias ([^)]*)\)", said)) is None:
        raise Failed(f"`podracer run` registered no version: {said[-500:]}")
    rows.append(row("`podracer run`: the first pipeline, ingest to deliver",
                    f"{run_s:.0f} s: v{first[1]} ({first[2]})"))
    seconds, said = loop.podracer("up", timeout=3600)
    recorded += [r["pid"] for r in json.loads((loop.root / "data" / "services" / "services.json").read_text())]
    rows.append(row("`podracer up`, until it returns (every service answers)", f"{seconds:.1f} s"))
    rows += [row(f"… {name} answers", f"{s:.1f} s") for name, s in service_seconds(said).items()]

    before, known = loop.versions(), loop.orders()
    _, said = loop.podracer("simulate", "--bars", "5", timeout=600)
    t0 = time.time()
    if "emitted" not in said:
        raise Failed(f"`podracer simulate` emitted no event: {said[-500:]}")
    run = until("the ct-cycle/on-new-data run to end", lambda: next(
        (r for r in loop.runs("ct-cycle/on-new-data", t0 - 30) if r["state_type"] in TERMINAL), None), 4 * CYCLE_S)
    start = epoch(run["start_time"]) if run["start_time"] else t0
    end = epoch(run["end_time"]) if run["end_time"] else time.time()
    rows.append(row("data event (`simulate` returned) → ct-cycle flow run starts", f"{start - t0:.1f} s"))
    tasks = task_seconds(requests.post(f"{loop.api}/task_runs/filter", timeout=30,
                                       json={"flow_runs": {"id": {"any_": [run["id"]]}}}).json())
    rows += [row(f"… task `{name}`", f"{s:.1f} s") for name, s in tasks]
    rows.append(row("… outside the task runs (the flow's own steps, Prefect)",
                    f"{end - start - sum(s for _, s in tasks):.1f} s"))
    rows.append(row(f"CT cycle, flow run start → end ({run['state_type'].lower()})",
                    f"{end - start:.1f} s ({(end - start) / 60:.1f} min)", "≤ 15 min", end - start <= CYCLE_S))
    rows.append(row("… the CT cycle / the first `podracer run`", f"{(end - start) / run_s:.2f}"))
    if run["state_type"] != "COMPLETED":
        raise Failed(f"the CT cycle ended {run['state_type']}: {run['state'].get('message')}")
    if not (new := sorted(loop.versions() - before)):
        rows.append(row("CT cycle result", "no new version registered"))
        return
    version = str(new[-1])
    if promoted := loop.champion() == version:
        order_s, recorded_s, _ = loop.delivery(version, t0, wait, known)
        rows.append(row(f"data event → v{version}'s first order at the broker (promoted)",
                        f"{order_s:.1f} s ({t0 + order_s - end:.1f} s after the cycle ended)" if order_s is not None
                        else f"delivered, 0 orders: {recorded_s:.1f} s" if recorded_s is not None
                        else f"**no delivery within {wait:.0f} s**"))
    else:
        rows.append(row(f"data event → orders of v{version}", "not promoted: no delivery"))

    pair = ("1", version) if promoted else (version, loop.champion() or "1")
    traded = {version} if promoted else set()  # versions that have delivered on the latest bar
    for i in range(repeats):
        target, label = pair[i % 2], f"alias → v{pair[i % 2]}, round {i + 1}"
        until("the delivery runs to end", lambda: all(r["state_type"] in TERMINAL  # each move measured alone
                                                      for r in loop.runs("deliver", 0.0)), wait)
        t1 = time.time()
        loop.set_champion(target)
        order_s, recorded_s, count = loop.delivery(target, t1, wait)
        if order_s is not None:
            at = f", recorded at {recorded_s:.1f} s" if recorded_s is not None else ""
            rows.append(row(f"{label}: first order at the broker", f"{order_s:.1f} s ({count} orders{at})", "≤ 5 s",
                            order_s <= ALIAS_S))
        elif recorded_s is not None:
            why = "bar already traded by this version" if target in traded else "its policy wants no trade"
            rows.append(row(f"{label}: delivery recorded, 0 orders ({why}; delivered.json `at`)",
                            f"{recorded_s:.1f} s", "≤ 5 s", recorded_s <= ALIAS_S))
        else:
            rows.append(row(label, f"**no delivery within {wait:.0f} s**", "≤ 5 s", False))
        if runs := loop.runs("deliver", t1):
            started = f"{epoch(runs[0]['start_time']) - t1:.1f} s" if runs[0]["start_time"] else "not yet"
            rows.append(row("… its deliver flow run created / started (webhook → event → the runner's process)",
                            f"{epoch(runs[0]['created']) - t1:.1f} s / {started}"
                            + (f"; **{len(runs)} runs**" if len(runs) > 1 else "")))
        traded.add(target)


def describe(p: Params, name: str) -> str:
    """The config in one line: its name, size, range and the cycle's settings (source defaults resolved)."""
    d = p.data
    bars = "" if d.freq == "1d" else f", {d.freq} bars"
    return (f"{name} ({d.symbols} symbols{bars}, {d.start}..{d.end}, population {p.evolution.population}, "
            f"ct.generations {p.ct.generations}, ct.eval_bars {p.ct.eval_bars})")


def history_cells(rows: list[Row]) -> tuple[str, str, str]:
    """The CT cycle's time, each alias round's result, and how many targets were met."""
    cycle = next((r[1] for r in rows if r[0].startswith("CT cycle, flow run")), "-")
    rounds = "; ".join(r[1] for r in rows if r[0].startswith("alias → ")) or "-"
    judged = [r[3] for r in rows if r[3]]
    return cycle, rounds, f"{judged.count('yes')} of {len(judged)}"


def report(rows: list[Row], failure: str | None, recording: bool) -> str | None:
    """Print the rows as a table; exit 1 on ``failure``; the table's markdown when it is to be recorded."""
    from rich.console import Console
    from rich.markdown import Markdown

    text = "\n".join(["| measure | result | target | met |", "|---|---|---|---|",
                      *(f"| {' | '.join(r)} |" for r in rows)])
    Console().print(Markdown(text))
    if failure:
        print(f"\nFAILED: {failure}", file=sys.stderr)
        raise SystemExit(1)
    if not recording:
        print("\n(not recorded in docs/benchmarks.md)")
        return None
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=Path, default=ROOT / "params.yaml",
                        help="the config the scratch project starts from (e.g. params.minute.yaml)")
    parser.add_argument("--tiny", action="store_true", help="the test suite's tiny sizes, for params.yaml's "
                        "daily bars (checks the script)")
    parser.add_argument("--record", action=argparse.BooleanOptionalAction, default=None,
                        help="record in docs/benchmarks.md (default: yes, but not with --tiny)")
    parser.add_argument("--repeats", type=int, default=3, help="alias moves, alternating versions")
    parser.add_argument("--wait", type=float, default=300.0, help="seconds to wait for one delivery")
    parser.add_argument("--workdir", type=Path, help="the scratch project folder (kept; default: a temp folder)")
    parser.add_argument("-s", "--set", dest="extra", action="append", default=[], metavar="KEY=VALUE",
                        help="one more override of the scratch params.yaml (e.g. services.start_timeout=240)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args()
    config = args.params.resolve()
    if args.tiny and config != ROOT / "params.yaml":
        parser.error("--tiny sets the test suite's daily sizes; make another config small with -s KEY=VALUE")
    root = (args.workdir or Path(tempfile.mkdtemp(prefix="bench-cycle-"))).resolve()
    (root / "mlflow").mkdir(parents=True, exist_ok=True)
    tree = scratch_params(root, config, args.tiny, args.extra)
    (root / "params.yaml").write_text(yaml.safe_dump(tree, sort_keys=False))
    described = describe(load_params(root / "params.yaml"), "tiny sizes" if args.tiny else config.name)
    loop, rows, recorded, failure = Loop(root, tree), [], [], None
    cores, load = len(os.sched_getaffinity(0)), os.getloadavg()[0]
    stamp = now()
    print(f"scratch project {root}; {cores} CPUs, load average {load:.2f}", flush=True)
    try:
        measure(loop, rows, args.repeats, args.wait, recorded)
    except (Failed, requests.RequestException, subprocess.TimeoutExpired, KeyError, OSError) as err:
        failure = f"{type(err).__name__}: {err}"
    finally:
        rows += loop.stop(recorded)
        if args.workdir is None:
            shutil.rmtree(root, ignore_errors=True)
    text = report(rows, failure, args.record if args.record is not None else not args.tiny)
    if text is None:
        return
    command = " ".join([".venv/bin/python", "-m", "benchmarks.perf.cycle", *sys.argv[1:]])
    default = config == ROOT / "params.yaml"
    key, title = (("cycle", "Continuous-training loop") if default else
                  (f"cycle-{config.stem.removeprefix('params.')}", f"Continuous-training loop, {config.name}"))
    record(Reading(
        key, f"{title}: data event → CT cycle → champion → orders",
        f"Command: `{command}`  \n"
        f"Machine: `nproc` = {cores}, load average {load:.2f} at the start and {os.getloadavg()[0]:.2f} at "
        f"the end; absolute times are noisy on a shared machine.  \nConfig: {described}, a scratch project on free "
        f"loopback ports. Targets: CT cycle ≤ 15 min, alias change → orders ≤ 5 s. Orders are seen by polling "
        f"`GET /v2/orders` every 0.2 s; each alias move waits until no delivery run is pending.\n\n{text}\n\n"
        f"A version is promoted only if it passes the gate, so the data event → order latency exists only for "
        f"cycles that promoted.",
        ("date", "commit", "command", "config", "CT cycle", "alias → orders, per round", "targets met"),
        (stamp, commit(), f"`{command}`", described, *history_cells(rows))), args.out)


if __name__ == "__main__":
    main()
