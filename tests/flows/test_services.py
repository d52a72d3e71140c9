"""``podracer up`` / ``status`` / ``down`` as a user runs them: real servers on free loopback
ports, stopped by PID, and no process left behind."""

import json
import os
import subprocess
import sys

import pytest
import requests
import yaml

from tests.conftest import REPO
from tests.flows.test_cli_commands import tiny_project
from tests.standins.postgres import free_port


def podracer(root, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API_URL", "MLFLOW_TRACKING_URI"))}
    done = subprocess.run([sys.executable, "-m", "flows.cli", *args], cwd=root, capture_output=True, text=True,
                          env={**env, "COLUMNS": "250", "PYTHONPATH": str(REPO)}, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "Traceback" not in output, output[-3000:]
    return " ".join(done.stdout.split())


def gone(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.slow
def test_up_serves_every_service_status_shows_them_and_down_leaves_no_process(tmp_path):
    tiny_project(tmp_path)
    prefect, mlflow, broker = free_port(), free_port(), free_port()
    assert len({prefect, mlflow, broker}) == 3
    tree = yaml.safe_load((tmp_path / "params.yaml").read_text())
    tree["services"] = {"prefect_port": prefect, "mlflow_port": mlflow, "start_timeout": 240}
    tree.setdefault("broker", {})["port"] = broker
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(tree))
    podracer(tmp_path, "ingest")
    podracer(tmp_path, "validate")
    state = tmp_path / "data" / "services" / "services.json"
    pids: list[int] = []
    try:
        said = podracer(tmp_path, "up")
        for name in ("prefect", "mlflow", "broker", "runner"):
            assert f"{name} answers at http://127.0.0.1:" in said
        recorded = json.loads(state.read_text())
        pids = [r["pid"] for r in recorded]
        assert [r["name"] for r in recorded] == ["prefect", "mlflow", "broker", "runner"]

        api = f"http://127.0.0.1:{prefect}/api"
        deployment = requests.get(f"{api}/deployments/name/rlops_pipeline/manual", timeout=10).json()
        assert deployment["enforce_parameter_schema"] is True
        assert "params" in deployment["parameter_openapi_schema"]["properties"]
        assert requests.get(f"http://127.0.0.1:{mlflow}/health", timeout=10).text == "OK"
        environ = (open(f"/proc/{recorded[1]['pid']}/environ", "rb").read().split(b"\0"))
        assert b"MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false" in environ  # else seven more processes
        assert any(e.startswith(b"MLFLOW_WEBHOOK_SECRET_ENCRYPTION_KEY=") for e in environ)
        key = tmp_path / "data" / "services" / "mlflow-webhook.key"
        assert oct(key.stat().st_mode & 0o777) == "0o600"

        shown = podracer(tmp_path, "status")
        assert shown.count("answers") == 4 and str(recorded[0]["pid"]) in shown
        again = podracer(tmp_path, "up")  # a second `up` starts nothing new
        assert again.count("already runs") == 4
        assert [r["pid"] for r in json.loads(state.read_text())] == pids

        stopped = podracer(tmp_path, "down")
        assert "4 service(s) stopped" in stopped
        assert all(gone(pid) for pid in pids), "a service or one of its children outlived `podracer down`"
        assert not state.exists()
        assert "no services recorded" in podracer(tmp_path, "status")
    finally:
        for pid in pids:
            if not gone(pid):
                os.killpg(pid, 9)
