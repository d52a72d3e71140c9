"""What the tests of ``podracer up``'s services (tests/flows/test_services.py, the continuous
loop; tests/flows/test_watch_live.py, the champion's live watch) share: commands run as a user
runs them and watched for egress, a tiny project folder on free loopback ports and its
services' answers, reads that wait patiently, and what a failed run leaves behind."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import requests
import yaml

from deploy.local.processes import alive, dump_stacks, group_alive
from standins.postgres import free_port
from tests.commands import podracer as run_command
from tests.test_egress import as_a_user
from tests.test_readme import tiny_project

SERVICES = ["prefect", "mlflow", "receiver", "broker", "runner"]
EGRESS_LOG = "egress.log"
WATCHED = ("podracer up ", "podracer simulate ", "podracer down", "/prefect server start", "/mlflow server",
           "-m flows.cli receiver", "-m flows.cli broker", "-m flows.deployments", "-m deploy.local.supervisor",
           "-m prefect.engine")
"""The commands, the processes ``podracer up`` starts and a flow run: the egress watch must have seen each."""
MODEL = "podracer-ppo"
READ = 30
"""Seconds the test waits for one answer from a server: on two loaded cores a restarted Prefect
server once took more than 10 s to list flow runs. How soon the loop acts is timed apart."""


def podracer(root, *args: str, code: int = 0) -> str:
    """Run a command as a user would, in ``root``, every process it starts watched for what leaves the
    machine (``tests/test_egress.py``; :meth:`Project.nothing_left_the_machine`)."""
    env = {k: v for k, v in as_a_user(root / EGRESS_LOG).items()
           if not k.startswith(("PREFECT_API_URL", "MLFLOW_TRACKING_URI", "PODRACER_TRACKING_URI"))}
    done = run_command(root, args, {**env, "COLUMNS": "250"})
    output = done.stdout + done.stderr
    assert done.returncode == code and "Traceback" not in output, output[-3000:]
    assert "Still processing items" not in output, output[-3000:]  # Prefect's events were sent before the exit
    return " ".join(done.stdout.split())


def gone(group: int) -> bool:
    return not group_alive(group)


def wait_for(what: str, check: Callable[[], Any], timeout: float, every: float = 1.0) -> Any:
    """``check()`` once it is truthy, asked every ``every`` seconds for ``timeout`` seconds. A read
    that times out is no answer yet, not a failure: in one suite on two loaded cores a Prefect
    server left a read unanswered for 30 s, for a reason not yet known. The deadline still fails
    the test, naming the reads that timed out, and :func:`kill_all` shows where each server was
    waiting."""
    deadline = time.monotonic() + timeout
    slow: list[str] = []
    while time.monotonic() < deadline:
        try:
            found = check()
        except requests.Timeout as err:
            found = None
            slow.append(f"{time.strftime('%H:%M:%S')} {err.request.method} {err.request.url}" if err.request else
                        f"{time.strftime('%H:%M:%S')} {err}")
            print(f"waiting for {what}: a read timed out, asking again: {slow[-1]}")
        if found:
            return found
        time.sleep(every)
    raise AssertionError(f"waited {timeout:.0f} s for {what}" + (f"; reads that timed out: {slow}" if slow else ""))


class Project:
    """A tiny project folder with its own ports, and what the test reads from its services. Its
    data is the tests' tiny pipeline built through the backtest (``built``), and the test
    registers its champion in this process: the stages and ``register`` are the CLI test's to
    run as commands (tests/flows/test_cli_commands.py); here they are only the ground."""

    def __init__(self, root, built) -> None:
        self.root = root
        tiny_project(root, dates=True)
        shutil.copytree(built.data_dir, root / "data")
        self.ports = {name: free_port() for name in ("prefect", "mlflow", "receiver", "broker", "runner")}
        assert len(set(self.ports.values())) == 5
        tree = yaml.safe_load((root / "params.yaml").read_text())
        tree["services"] = {"prefect_port": self.ports["prefect"], "mlflow_port": self.ports["mlflow"],
                            "runner_port": self.ports["runner"], "poll_seconds": 10, "start_timeout": 240,
                            "restart_backoff": 0.5, "restart_limit": 3}  # a crash loop ends sooner
        tree["ct"] = {"eval_bars": 20, "generations": 1}
        (root / "params.yaml").write_text(yaml.safe_dump(tree))
        self.overrides = ["-s", f"services.receiver_port={self.ports['receiver']}", "-s",
                          f"broker.port={self.ports['broker']}", "-s", "ct.generations=2"]
        """What every `podracer up` is given: the receiver and broker listen where params.yaml does
        not say, and cycles train long enough to be killed in the middle."""
        self.api = f"http://127.0.0.1:{self.ports['prefect']}/api"
        self.mlflow = f"http://127.0.0.1:{self.ports['mlflow']}/api/2.0/mlflow"

    def recorded(self) -> list[dict]:
        return json.loads((self.root / "data" / "services" / "services.json").read_text())

    def versions(self) -> dict[str, dict]:
        found = requests.get(f"{self.mlflow}/model-versions/search", params={"filter": f"name='{MODEL}'"},
                             timeout=READ).json().get("model_versions", [])
        return {v["version"]: {t["key"]: t["value"] for t in v.get("tags", [])} for v in found}

    def training(self, version: str) -> dict[str, float]:
        """The training metrics of the run that registered ``version``."""
        run_id = requests.get(f"{self.mlflow}/model-versions/get", params={"name": MODEL, "version": version},
                              timeout=READ).json()["model_version"]["run_id"]
        metrics = requests.get(f"{self.mlflow}/runs/get", params={"run_id": run_id}, timeout=READ).json()["run"]["data"]
        return {m["key"]: m["value"] for m in metrics.get("metrics", []) if m["key"].startswith("training_")}

    def set_champion(self, version: str) -> None:
        answer = requests.post(f"{self.mlflow}/registered-models/alias", timeout=READ,
                               json={"name": MODEL, "alias": "champion", "version": version})
        assert answer.status_code == 200, answer.text

    def delivered(self) -> str | None:
        path = self.root / "data" / "broker" / "delivered.json"
        return json.loads(path.read_text())["version"] if path.exists() else None

    def keys(self) -> dict[str, str]:
        keys = json.loads((self.root / "data" / "broker" / "keys.json").read_text())
        return {"APCA-API-KEY-ID": keys["key_id"], "APCA-API-SECRET-KEY": keys["secret_key"]}

    def orders_of(self, version: str) -> list[dict]:
        orders = requests.get(f"http://127.0.0.1:{self.ports['broker']}/v2/orders", params={"status": "all"},
                              headers=self.keys(), timeout=READ).json()
        return [o for o in orders if o["client_order_id"].startswith(f"pdr-v{version}-")]

    def answers(self, name: str) -> bool:
        """The service's own health check, asked directly (docs/operations.md)."""
        url, headers = {"prefect": (f"{self.api}/health", {}),
                        "mlflow": (f"http://127.0.0.1:{self.ports['mlflow']}/health", {}),
                        "receiver": (f"http://127.0.0.1:{self.ports['receiver']}/health", {}),
                        "broker": (f"http://127.0.0.1:{self.ports['broker']}/v2/clock", self.keys()),
                        "runner": (f"http://127.0.0.1:{self.ports['runner']}/health", {})}[name]
        try:
            return requests.get(url, headers=headers, timeout=3).status_code == 200
        except requests.RequestException:
            return False

    def down_leaves_nothing(self, pids: list[int]) -> None:
        pids += [r["pid"] for r in self.recorded()]
        boss = json.loads((self.root / "data" / "services" / "supervisor.json").read_text())["pid"]
        stopped = podracer(self.root, "down")
        assert "supervisor stopped" in stopped and "5 service(s) stopped" in stopped
        assert all(gone(pid) for pid in [*pids, boss]), "a service or one of its children outlived `podracer down`"
        time.sleep(2)  # a supervisor still running would have started something again by now
        left = subprocess.run(["pgrep", "-f", str(self.root)], capture_output=True, text=True).stdout.split()
        assert not left, f"processes left: {left}"
        assert "no services recorded" in podracer(self.root, "status")

    def nothing_left_the_machine(self) -> None:
        """No process the test started looked up a name or connected beyond loopback, and the
        watch ran in each kind of process ``up`` starts, flow runs included (docs/testing.md)."""
        watched = (self.root / f"{EGRESS_LOG}.watched").read_text()
        assert [command for command in WATCHED if command not in watched] == []
        log = self.root / EGRESS_LOG
        text = log.read_text() if log.exists() else ""
        reaches = sorted({" ".join([*line.split()[:2], "by", *line.split()[4:]])[:160]
                          for line in text.splitlines() if line.startswith("socket.")})
        assert not text, "\n".join(reaches) + "\n\nthe first, with its stack:\n" + text.split("\n\n")[0][-3000:]

    def flow_runs(self, flow: str) -> list[dict]:
        runs = requests.post(f"{self.api}/flow_runs/filter", timeout=READ,
                             json={"flows": {"name": {"any_": [flow]}}, "sort": "START_TIME_ASC"}).json()
        return [r for r in runs if r["start_time"]]

    def cycles_due(self) -> list[dict]:
        """CT cycles running, or queued to start within a minute (not tonight's schedule)."""
        soon = (datetime.now(timezone.utc) + timedelta(minutes=1)).isoformat()
        return [r for kinds, extra in ((["PENDING", "RUNNING"], {}),
                                       (["SCHEDULED"], {"next_scheduled_start_time": {"before_": soon}}))
                for r in requests.post(f"{self.api}/flow_runs/filter", timeout=READ, json={
                    "flows": {"name": {"any_": ["ct-cycle"]}},
                    "flow_runs": {"state": {"type": {"any_": kinds}}, **extra}}).json()]

    def pid(self, name: str) -> int:
        return next(r["pid"] for r in self.recorded() if r["name"] == name)

    def kill(self, name: str) -> None:
        pid = self.pid(name)
        os.killpg(pid, signal.SIGTERM)
        wait_for(f"{name} to stop", lambda: gone(pid), 30)


def kill_all(root, pids: list[int]) -> None:
    """What a failed test leaves: the supervisor first, so that nothing comes back. Each service
    still running then writes its threads' stacks to its log, as the supervisor has a service
    that stopped answering do (:func:`deploy.local.processes.dump_stacks`): where a server
    that stopped answering was waiting. The end of each log goes to the test's output, which
    pytest shows when the test fails. After a test that passed, ``down`` has stopped them all."""
    home = root / "data" / "services"
    boss = [json.loads((home / "supervisor.json").read_text())["pid"]] if (home / "supervisor.json").exists() else []
    for pid in boss:
        if not gone(pid):
            os.killpg(pid, signal.SIGKILL)
    state = home / "services.json"
    services = [r["pid"] for r in json.loads(state.read_text())] if state.exists() else []
    for pid in dict.fromkeys(pids + services):
        if alive(pid):
            dump_stacks(pid)
    for log in sorted(home.glob("*.log")):
        lines = log.read_text(errors="replace").splitlines()
        dump = next((i for i, line in enumerate(lines) if line.startswith("Fatal Python error: Aborted")), len(lines))
        print(f"==> {log} (its last lines, and the stacks it dumped)", *lines[max(0, dump - 60):], sep="\n")
    for pid in pids + services:
        if not gone(pid):
            os.killpg(pid, signal.SIGKILL)
