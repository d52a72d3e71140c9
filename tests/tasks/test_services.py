"""The supervisor of ``podracer up``: every service runs with the config ``up`` computed,
overrides included, and ``status``, ``down`` and the CLI's clients find the services where
that config put them. Real servers are in tests/flows/test_services.py; here the services are
``sleep`` processes and the health checks are stubbed, so it takes a second."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tasks import services
from tasks.config import Params, load_params
from tasks.settings import SERVER_ENV
from tests.conftest import tiny_params

HEADERS = {"APCA-API-KEY-ID": "PKTEST", "APCA-API-SECRET-KEY": "secret"}
PROJECT = ("receiver", "broker", "runner")
"""The services that are podracer's own code, and so load the config."""


def overridden(root: Path) -> Params:
    return tiny_params(root, "services.receiver_port=8820", "broker.port=8810", "services.prefect_port=4321",
                       "services.mlflow_port=5432")


def test_the_effective_config_reads_back_equal_and_every_project_service_loads_it(tmp_path):
    params = overridden(tmp_path)
    path = services.write_effective(params)
    assert path == params.data_dir / "services" / "params.yaml"
    assert load_params(path) == params
    assert services.effective(tiny_params(tmp_path)) == params  # what runs, not what params.yaml says
    plan = {s.name: s for s in services.plan(params, path, HEADERS)}
    assert list(plan) == ["prefect", "mlflow", "receiver", "broker", "runner"]
    for name in PROJECT:
        assert plan[name].command[-2:] == ["-p", str(path)], name
    assert plan["receiver"].health == "http://127.0.0.1:8820/health"
    assert (plan["broker"].health, plan["broker"].headers) == ("http://127.0.0.1:8810/v2/clock", HEADERS)
    assert plan["prefect"].command[-2:] == ["--port", "4321"]
    assert plan["runner"].env["PREFECT_API_URL"] == "http://127.0.0.1:4321/api"
    assert plan["runner"].env[SERVER_ENV] == plan["runner"].env["MLFLOW_TRACKING_URI"] == "http://127.0.0.1:5432"


@pytest.fixture
def sleepers(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every service starts as a ``sleep`` in a session of its own and answers at once; the
    commands ``up`` meant to run are collected."""
    commands: list[list[str]] = []
    real = subprocess.Popen

    def popen(command: list[str], **kwargs) -> subprocess.Popen:
        commands.append(command)
        return real([sys.executable, "-c", "import time; time.sleep(60)"], **kwargs)

    monkeypatch.setattr(services.subprocess, "Popen", popen)
    monkeypatch.setattr(services, "answers", lambda url, headers=None: True)
    monkeypatch.setattr(services, "ensure_webhook", lambda params: "hook")
    return commands


def test_up_starts_each_service_with_the_config_it_computed_and_down_removes_it(tmp_path, sleepers):
    params = overridden(tmp_path)
    said: list[str] = []
    running = services.up(params, HEADERS, say=said.append)
    effective = params.data_dir / "services" / "params.yaml"
    try:
        assert [r.name for r in running] == [r.name for r in services.recorded(params)] == [
            "prefect", "mlflow", "receiver", "broker", "runner"]
        assert load_params(effective) == params
        by_name = dict(zip([r.name for r in running], sleepers, strict=True))
        for name in PROJECT:
            assert by_name[name][-2:] == ["-p", str(effective)], name
        assert all(services.alive(r.pid) for r in running)
        assert services.up(params, HEADERS, say=said.append) == running  # nothing started twice
        assert sum("already runs" in line for line in said) == 5
        with pytest.raises(services.ServiceError, match="run with another config"):
            services.up(tiny_params(tmp_path), HEADERS)  # the overrides forgotten: the services would disagree
        assert load_params(effective) == params and all(services.alive(r.pid) for r in running)
    finally:
        stopped = services.down(params, say=lambda _: None)
    assert stopped == ["runner", "broker", "receiver", "mlflow", "prefect"]
    assert not any(services.alive(r.pid) for r in running)
    assert not effective.exists() and services.recorded(params) == []


def test_status_and_the_clients_find_the_services_where_up_put_them(tmp_path, sleepers, monkeypatch):
    params = overridden(tmp_path)
    services.up(params, HEADERS, say=lambda _: None)
    try:
        plain = tiny_params(tmp_path)  # a later command without the overrides
        asked: list[str] = []
        monkeypatch.setattr(services, "answers", lambda url, headers=None: asked.append(url) or True)
        assert [(r.name, up, ok) for r, up, ok in services.status(plain, HEADERS)] == [
            (name, True, True) for name in ("prefect", "mlflow", "receiver", "broker", "runner")]
        assert "http://127.0.0.1:8820/health" in asked and "http://127.0.0.1:8810/v2/clock" in asked
        monkeypatch.setenv(SERVER_ENV, "unset")  # restored after the test
        prefect = next(r for r in services.recorded(plain) if r.name == "prefect")
        os.killpg(prefect.pid, 9)  # without a Prefect server this process keeps its own Prefect settings
        while services.alive(prefect.pid):
            time.sleep(0.01)
        reached = services.use_servers(plain)
        assert (reached.services, reached.broker) == (params.services, params.broker)
        assert reached.evolution == plain.evolution  # only the services' addresses change
        assert os.environ[SERVER_ENV] == "http://127.0.0.1:5432"
    finally:
        services.down(params, say=lambda _: None)
    assert services.use_servers(plain) is plain  # nothing recorded: the config as given
