"""The continuous loop end to end, as a user runs it (docs/operations.md): ``podracer up`` on
free loopback ports, some of them given as overrides, new bars → event → CT cycle →
registry, an alias moved through MLflow's REST API → webhook → delivery at the broker,
``podracer rollback``, a lost webhook caught by the poll, two events one cycle at a time,
the tracking server down for a cycle, the runner killed mid-cycle and the cycle run again by
the data poll, resumed from its checkpoint, ``podracer down`` and no process left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import requests
import yaml

from tests.conftest import REPO
from tests.flows.test_cli_commands import tiny_project
from tests.standins.postgres import free_port

SERVICES = ["prefect", "mlflow", "receiver", "broker", "runner"]
MODEL = "podracer-ppo"


def podracer(root, *args: str, code: int = 0) -> str:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PREFECT_API_URL", "MLFLOW_TRACKING_URI", "PODRACER_TRACKING_URI"))}
    done = subprocess.run([sys.executable, "-m", "flows.cli", *args], cwd=root, capture_output=True, text=True,
                          env={**env, "COLUMNS": "250", "PYTHONPATH": str(REPO)}, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == code and "Traceback" not in output, output[-3000:]
    assert "Still processing items" not in output, output[-3000:]  # Prefect's events were sent before the exit
    return " ".join(done.stdout.split())


def gone(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return True
    return False


def wait_for(what: str, check: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(1.0)
    raise AssertionError(f"waited {timeout:.0f} s for {what}")


class Project:
    """A tiny project folder with its own ports, and what the test reads from its services."""

    def __init__(self, root) -> None:
        self.root = root
        tiny_project(root)
        self.ports = {name: free_port() for name in ("prefect", "mlflow", "receiver", "broker")}
        assert len(set(self.ports.values())) == 4
        tree = yaml.safe_load((root / "params.yaml").read_text())
        tree["services"] = {"prefect_port": self.ports["prefect"], "mlflow_port": self.ports["mlflow"],
                            "poll_seconds": 10, "start_timeout": 240}
        tree["ct"] = {"eval_bars": 20, "generations": 1}
        (root / "params.yaml").write_text(yaml.safe_dump(tree))
        self.overrides = ["-s", f"services.receiver_port={self.ports['receiver']}", "-s",
                          f"broker.port={self.ports['broker']}", "-s", "ct.generations=3"]
        """What every `podracer up` is given: the receiver and broker listen where params.yaml does
        not say, and cycles train long enough to be killed in the middle."""
        self.api = f"http://127.0.0.1:{self.ports['prefect']}/api"
        self.mlflow = f"http://127.0.0.1:{self.ports['mlflow']}/api/2.0/mlflow"

    def recorded(self) -> list[dict]:
        return json.loads((self.root / "data" / "services" / "services.json").read_text())

    def versions(self) -> dict[str, dict]:
        found = requests.get(f"{self.mlflow}/model-versions/search", params={"filter": f"name='{MODEL}'"},
                             timeout=10).json().get("model_versions", [])
        return {v["version"]: {t["key"]: t["value"] for t in v.get("tags", [])} for v in found}

    def set_champion(self, version: str) -> None:
        answer = requests.post(f"{self.mlflow}/registered-models/alias", timeout=10,
                               json={"name": MODEL, "alias": "champion", "version": version})
        assert answer.status_code == 200, answer.text

    def delivered(self) -> str | None:
        path = self.root / "data" / "broker" / "delivered.json"
        return json.loads(path.read_text())["version"] if path.exists() else None

    def orders_of(self, version: str) -> list[dict]:
        keys = json.loads((self.root / "data" / "broker" / "keys.json").read_text())
        headers = {"APCA-API-KEY-ID": keys["key_id"], "APCA-API-SECRET-KEY": keys["secret_key"]}
        orders = requests.get(f"http://127.0.0.1:{self.ports['broker']}/v2/orders", params={"status": "all"},
                              headers=headers, timeout=10).json()
        return [o for o in orders if o["client_order_id"].startswith(f"pdr-v{version}-")]

    def flow_runs(self, flow: str) -> list[dict]:
        runs = requests.post(f"{self.api}/flow_runs/filter", timeout=10,
                             json={"flows": {"name": {"any_": [flow]}}, "sort": "START_TIME_ASC"}).json()
        return [r for r in runs if r["start_time"]]

    def cycles_due(self) -> list[dict]:
        """CT cycles running, or queued to start within a minute (not tonight's schedule)."""
        soon = (datetime.now(timezone.utc) + timedelta(minutes=1)).isoformat()
        return [r for kinds, extra in ((["PENDING", "RUNNING"], {}),
                                       (["SCHEDULED"], {"next_scheduled_start_time": {"before_": soon}}))
                for r in requests.post(f"{self.api}/flow_runs/filter", timeout=10, json={
                    "flows": {"name": {"any_": ["ct-cycle"]}},
                    "flow_runs": {"state": {"type": {"any_": kinds}}, **extra}}).json()]

    def pid(self, name: str) -> int:
        return next(r["pid"] for r in self.recorded() if r["name"] == name)

    def kill(self, name: str) -> None:
        pid = self.pid(name)
        os.killpg(pid, signal.SIGTERM)
        wait_for(f"{name} to stop", lambda: gone(pid), 30)


@pytest.mark.slow
def test_new_bars_retrain_the_champion_is_delivered_rolled_back_and_down_leaves_nothing(tmp_path):
    p = Project(tmp_path)
    run = podracer(tmp_path, "run")
    assert "model podracer-ppo version 1 (alias champion)" in run
    pids: list[int] = []
    try:
        said = podracer(tmp_path, "up", *p.overrides)
        for name in SERVICES:
            assert f"{name} answers at http://127.0.0.1:" in said
        pids = [r["pid"] for r in p.recorded()]
        assert [r["name"] for r in p.recorded()] == SERVICES
        for flow, name in (("rlops-pipeline", "manual"), ("ct-cycle", "nightly"), ("ct-cycle", "on-new-data"),
                           ("deliver", "on-promotion"), ("trade", "session")):
            deployment = requests.get(f"{p.api}/deployments/name/{flow}/{name}", timeout=10).json()
            assert deployment["enforce_parameter_schema"] is True, (flow, name)
            assert "params" in deployment["parameter_openapi_schema"]["properties"]
        nightly = requests.get(f"{p.api}/deployments/name/ct-cycle/nightly", timeout=10).json()
        assert nightly["schedules"][0]["schedule"] == {"cron": "30 17 * * 1-5", "timezone": "America/New_York",
                                                        "day_or": True}
        mlflow_env = open(f"/proc/{pids[1]}/environ", "rb").read().split(b"\0")
        assert b"MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false" in mlflow_env  # else seven more processes
        assert oct((tmp_path / "data" / "services" / "mlflow-webhook.key").stat().st_mode & 0o777) == "0o600"
        assert podracer(tmp_path, "status").count("answers") == 5  # where the overrides put them
        assert podracer(tmp_path, "up", *p.overrides).count("already runs") == 5
        assert [r["pid"] for r in p.recorded()] == pids

        # new bars → podracer.data.arrived → ct-cycle/on-new-data registers version 2
        assert "event podracer.data.arrived emitted" in podracer(tmp_path, "simulate", "--bars", "5")
        tags = wait_for("the event-triggered CT cycle to register version 2",
                        lambda: p.versions().get("2", {}).get("podracer.complete") == "true" and p.versions()["2"],
                        300)
        assert tags["origin"] == "ct" and tags["eval_window"].endswith("..2022-01-07")

        # the alias moved through MLflow's REST API → webhook → deliver/on-promotion → orders
        moved = time.monotonic()
        p.set_champion("2")
        wait_for("delivery with version 2", lambda: p.delivered() == "2", 90)
        assert time.monotonic() - moved < 60
        assert p.orders_of("2"), "the promotion-triggered delivery placed no order at the broker"

        # rollback goes through the registry: delivery follows
        assert podracer(tmp_path, "rollback").endswith("version 1 is champion again; version 2 is previous_champion")
        wait_for("delivery with version 1 again", lambda: p.delivered() == "1", 90)

        # a lost webhook: the receiver is down while the alias moves; the registry poll delivers
        p.kill("receiver")
        p.set_champion("2")
        wait_for("the poll to deliver version 2", lambda: p.delivered() == "2", 60)

        # two data events in quick succession: one cycle at a time, the second queued, not lost
        before = len(p.flow_runs("ct-cycle"))
        podracer(tmp_path, "simulate", "--bars", "1")
        podracer(tmp_path, "simulate", "--bars", "1")
        runs = wait_for("two more CT cycles to finish", lambda: (
            r if len(r := p.flow_runs("ct-cycle")) >= before + 2
            and all(x["state_type"] == "COMPLETED" for x in r[before:]) else None), 300)
        first, second = runs[before], runs[before + 1]
        assert first["end_time"] <= second["start_time"], "two CT cycles overlapped"

        # the tracking server down: the cycle fails in one line and registers nothing; the next one succeeds
        known = set(p.versions())
        p.kill("mlflow")
        podracer(tmp_path, "simulate", "--bars", "1")
        failed = wait_for("the cycle to fail", lambda: next(
            (r for r in p.flow_runs("ct-cycle")[before + 2:] if r["state_type"] == "FAILED"), None), 120)
        assert "does not answer: nothing registered" in failed["state"]["message"]
        assert "mlflow answers" in podracer(tmp_path, "up", *p.overrides)
        assert set(p.versions()) == known
        podracer(tmp_path, "simulate", "--bars", "1")
        wait_for("the next cycle to register", lambda: len(set(p.versions()) - known) == 1, 300)

        # the runner SIGKILLed mid-training: the run crashes and its event is spent; once `podracer up`
        # restarts the runner, its data poll starts the cycle again, which resumes from its checkpoint
        wait_for("the poll's retries of the failed cycle to end", lambda: not p.cycles_due(), 180)
        known, before, marker = set(p.versions()), len(p.flow_runs("ct-cycle")), time.time()
        podracer(tmp_path, "simulate", "--bars", "1")
        checkpoints = tmp_path / "data" / "checkpoints"
        wait_for("the cycle's first checkpoint", lambda: any(
            c.stat().st_mtime > marker for c in checkpoints.glob("*/evolution.pt")), 300)
        runner = p.pid("runner")
        os.kill(runner, signal.SIGKILL)
        crashed = wait_for("the cycle to crash", lambda: next(
            (r for r in p.flow_runs("ct-cycle")[before:] if r["state_type"] == "CRASHED"), None), 60)
        assert set(p.versions()) == known
        folders = set(checkpoints.iterdir())
        pids.append(runner)
        assert "runner answers" in podracer(tmp_path, "up", *p.overrides)
        wait_for("the cycle to run again by itself and register", lambda: len(set(p.versions()) - known) == 1, 300)
        # the version is registered a moment before the run ends: wait for its state too
        wait_for("the rerun to complete", lambda: any(
            r["state_type"] == "COMPLETED" and r["start_time"] > crashed["start_time"]
            for r in p.flow_runs("ct-cycle")[before:]), 60)
        assert set(checkpoints.iterdir()) == folders, "the rerun did not resume the crashed cycle's checkpoint"

        pids += [r["pid"] for r in p.recorded()]  # the restarted receiver, mlflow and runner too
        stopped = podracer(tmp_path, "down")
        assert "5 service(s) stopped" in stopped
        assert all(gone(pid) for pid in pids), "a service or one of its children outlived `podracer down`"
        left = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout.split()
        assert not left, f"processes left: {left}"
        assert "no services recorded" in podracer(tmp_path, "status")
    finally:
        state = tmp_path / "data" / "services" / "services.json"
        for pid in pids + ([r["pid"] for r in json.loads(state.read_text())] if state.exists() else []):
            if not gone(pid):
                os.killpg(pid, signal.SIGKILL)
