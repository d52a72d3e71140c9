"""deploy/compose.yaml runs the services of ``podracer up`` (deploy/local/services.py) as containers:
the same five services, the same commands and settings, on the host's network and bound to
127.0.0.1 as ``podracer up`` binds them: nothing listens elsewhere and nothing is published.

The commands are compared with ``deploy.local.services.plan()`` on the project's params.yaml, so the
two cannot drift apart; ``docker compose config`` checks the file itself where Compose v2 is
installed (it needs no Docker engine)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from deploy.local import services
from tasks.config import Params, load_params
from tests.conftest import REPO

COMPOSE = REPO / "deploy" / "compose.yaml"
SERVICES = {"prefect", "mlflow", "broker", "receiver", "runner"}
SECRETS = ("MLFLOW_WEBHOOK_SECRET_ENCRYPTION_KEY", "PODRACER_WEBHOOK_SECRET")
WEBHOOK_SETTINGS = {"MLFLOW_WEBHOOK_ALLOWED_SCHEMES", "MLFLOW_WEBHOOK_ALLOW_PRIVATE_IPS",
                    "MLFLOW_WEBHOOK_SECRET_ENCRYPTION_KEY"}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())  # the x- anchors and << merges resolve here


@pytest.fixture(scope="module")
def params(tmp_path_factory: pytest.TempPathFactory) -> Params:
    """The project's params.yaml, with data_dir in a temporary folder: plan() creates the
    webhook key and the broker's keys there, not in the checkout."""
    return load_params(REPO / "params.yaml", [f"data_dir={tmp_path_factory.mktemp('compose') / 'data'}"])


@pytest.fixture(scope="module")
def plan(params: Params) -> dict[str, services.Service]:
    return {s.name: s for s in services.plan(params, Path("params.yaml"), {})}


def env(service: dict) -> dict[str, str]:
    value = service.get("environment", {})
    if isinstance(value, list):
        value = dict(item.partition("=")[::2] for item in value)
    return {k: str(v) for k, v in value.items()}


def argv(command: list[str]) -> list[str]:
    """A command with its executable by name (``/x/.venv/bin/python3.11`` -> ``python``)."""
    name = Path(command[0]).name
    return ["python" if name.startswith("python") else name, *map(str, command[1:])]


def flags(command: list[str]) -> dict[str, str]:
    return {arg: str(command[i + 1]) for i, arg in enumerate(command[:-1]) if arg.startswith("--")}


def test_the_services_are_exactly_those_of_podracer_up_and_the_receiver(compose):
    assert set(compose["services"]) == SERVICES


def test_every_service_binds_loopback_on_the_host_network_and_nothing_is_published(compose):
    for name, service in compose["services"].items():
        assert service["network_mode"] == "host", name
        assert not service.get("ports"), f"{name} publishes a port"
        host = flags(service["command"]).get("--host")
        assert host in (None, "127.0.0.1"), f"{name} binds {host}"
    assert flags(compose["services"]["prefect"]["command"])["--host"] == "127.0.0.1"
    assert flags(compose["services"]["mlflow"]["command"])["--host"] == "127.0.0.1"


def test_mlflow_has_the_webhook_settings_a_required_fixed_key_and_job_execution_off(compose, plan):
    mlflow = env(compose["services"]["mlflow"])
    assert WEBHOOK_SETTINGS <= set(mlflow)
    assert mlflow["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"
    assert mlflow["MLFLOW_WEBHOOK_ALLOW_PRIVATE_IPS"] == "true"
    assert set(mlflow["MLFLOW_WEBHOOK_ALLOWED_SCHEMES"].split(",")) == {"http", "https"}
    # Required from the environment or deploy/.env, never a value in the file: a key that
    # changes at restart makes deliveries fail silently (docs/operations.md).
    assert mlflow["MLFLOW_WEBHOOK_SECRET_ENCRYPTION_KEY"].startswith("${MLFLOW_WEBHOOK_SECRET_ENCRYPTION_KEY:?")
    # ... and the same settings as `podracer up` gives its MLflow server.
    for key, value in plan["mlflow"].env.items():
        assert key in mlflow, key
        if key != "MLFLOW_WEBHOOK_SECRET_ENCRYPTION_KEY":
            assert mlflow[key] == value, key


def test_mlflow_command_has_the_flags_of_podracer_up(compose, plan):
    ours = compose["services"]["mlflow"]["command"]
    theirs = plan["mlflow"].command
    assert set(flags(ours)) == set(flags(theirs))
    assert {"--backend-store-uri", "--artifacts-destination", "--workers", "--host"} <= set(flags(ours))
    assert flags(ours) == flags(theirs)


def test_every_command_is_the_one_podracer_up_runs(compose, plan):
    shared = SERVICES & set(plan)
    assert {"prefect", "mlflow", "broker", "runner"} <= shared
    for name in shared:
        assert argv(compose["services"][name]["command"]) == argv(plan[name].command), name


def test_the_clients_find_the_servers_on_loopback(compose, plan):
    prefect_port = flags(compose["services"]["prefect"]["command"])["--port"]
    mlflow_port = flags(compose["services"]["mlflow"]["command"])["--port"]
    for name in ("runner", "receiver"):
        client = env(compose["services"][name])
        assert client["PREFECT_API_URL"].endswith("/api"), name
        assert urlparse(client["PREFECT_API_URL"]).netloc == f"127.0.0.1:{prefect_port}", name
        assert urlparse(client["MLFLOW_TRACKING_URI"]).netloc == f"127.0.0.1:{mlflow_port}", name
        assert client["PODRACER_TRACKING_URI"] == client["MLFLOW_TRACKING_URI"], name
    runner = env(compose["services"]["runner"])
    assert set(plan["runner"].env) <= set(runner)
    assert runner["PREFECT_RUNNER_POLL_FREQUENCY"] == plan["runner"].env["PREFECT_RUNNER_POLL_FREQUENCY"] == "2"


def test_the_broker_and_receiver_are_checked_on_their_configured_loopback_ports(compose, params):
    assert params.broker.host == "127.0.0.1"
    svc = compose["services"]
    assert str(params.broker.port) in " ".join(svc["broker"]["healthcheck"]["test"])
    assert str(params.services.receiver_port) in " ".join(svc["receiver"]["healthcheck"]["test"])
    assert f"127.0.0.1:{params.services.runner_port}/health" in " ".join(svc["runner"]["healthcheck"]["test"])
    assert env(svc["runner"])["PREFECT_RUNNER_SERVER_PORT"] == str(params.services.runner_port)
    assert env(svc["receiver"])["PODRACER_WEBHOOK_SECRET"].startswith("${PODRACER_WEBHOOK_SECRET:?")


def test_dependencies_wait_for_health_checks_that_exist(compose):
    svc = compose["services"]
    for name, service in svc.items():
        assert "healthcheck" in service, name
        for dep, how in service.get("depends_on", {}).items():
            assert dep in svc, (name, dep)
            if how.get("condition") == "service_healthy":
                assert "healthcheck" in svc[dep], (name, dep)
    for name in ("runner", "receiver"):
        assert {svc[name]["depends_on"][dep]["condition"] for dep in ("prefect", "mlflow")} == {"service_healthy"}
    assert svc["prefect"]["healthcheck"]["test"][-1].count("/api/health") == 1


def test_the_runner_gets_more_time_to_stop_than_the_default(compose):
    grace = compose["services"]["runner"]["stop_grace_period"]
    assert grace.endswith("s") and int(grace[:-1]) > 10


def _compose_v2() -> str | None:
    """Why `docker compose` cannot be used here, or None when it can."""
    if shutil.which("docker") is None:
        return "no docker client on PATH"
    try:
        done = subprocess.run(["docker", "compose", "version"], check=False, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"`docker compose version` failed: {err}"
    if done.returncode != 0:
        return "the Docker Compose v2 plugin is not installed (`docker compose version` fails)"
    return None


NO_COMPOSE = _compose_v2()


def _config(tmp_path: Path, **secrets: str) -> subprocess.CompletedProcess:
    empty = tmp_path / "empty.env"  # not deploy/.env: the result must not depend on a local one
    empty.write_text("")
    environ = {k: v for k, v in os.environ.items() if k not in SECRETS}
    return subprocess.run(["docker", "compose", "-f", str(COMPOSE), "--env-file", str(empty), "config", "--quiet"],
                          check=False, cwd=REPO, env={**environ, **secrets}, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.skipif(NO_COMPOSE is not None, reason=NO_COMPOSE or "")
def test_docker_compose_accepts_the_file(tmp_path):
    done = _config(tmp_path, **{name: f"test-{name.lower()}" for name in SECRETS})
    assert done.returncode == 0, done.stderr


@pytest.mark.skipif(NO_COMPOSE is not None, reason=NO_COMPOSE or "")
@pytest.mark.parametrize("missing", SECRETS)
def test_docker_compose_refuses_to_start_without_either_secret(tmp_path, missing):
    done = _config(tmp_path, **{name: "set" for name in SECRETS if name != missing})
    assert done.returncode != 0
    assert f"required variable {missing} is missing a value" in done.stderr, done.stderr
