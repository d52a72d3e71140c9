"""``podracer up``, ``status`` and ``down``: every service runs with the config ``up`` computed,
overrides included, under a supervisor that ``up`` leaves behind and ``down`` stops first, and
``status``, ``down`` and the CLI's clients find the services where that config put them. Real
servers are in tests/flows/test_services.py; here the supervisor is real and the services are
stand-ins (tests/standins/service.py), so it takes seconds."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from deploy.local import services
from deploy.local.processes import alive
from deploy.local.services import Service
from standins.tiny import tiny_params
from tasks.config import Params, load_params
from tasks.settings import SERVER_ENV
from tests.deploy.local.test_supervisor import standin

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
def standins(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Service]:
    """Every service of the plan is a stand-in HTTP server (tests/standins/service.py) under
    its own name; the real supervisor process runs them. The plans made are collected."""
    made: list[Service] = []
    real = services.plan

    def plan(params: Params, params_file: Path, headers: dict) -> list[Service]:
        if not made:  # one stand-in per service, on one port, whoever asks
            made.extend(standin(tmp_path / "standins", s.name, s.needs) for s in real(params, params_file, headers))
        return list(made)

    monkeypatch.setattr(services, "plan", plan)
    return made


def test_up_leaves_a_supervisor_that_starts_each_service_and_down_stops_it_first(tmp_path, standins):
    params = overridden(tmp_path)
    said: list[str] = []
    running = services.up(params, HEADERS, say=said.append)
    effective = params.data_dir / "services" / "params.yaml"
    boss = services.supervisor(params)
    try:
        assert boss is not None and alive(boss.pid) and boss.phase == "watching"
        assert [r.name for r in running] == [r.name for r in services.recorded(params)] == [
            "prefect", "mlflow", "receiver", "broker", "runner"]
        heard = [line.split(" answers at ")[0] for line in said]  # in the order they answered: started together
        assert sorted(heard) == sorted(r.name for r in running)  # each once
        assert heard.index("runner") > heard.index("prefect")  # it starts once what it needs answers
        assert load_params(effective) == params
        assert all(alive(r.pid) and r.state == "answers" for r in running), [
            (r.name, r.pid, alive(r.pid), r.state) for r in running]
        plan = (params.data_dir / "services" / services.PLAN)
        assert oct(plan.stat().st_mode & 0o777) == "0o600"  # the services' environments hold secrets
        again: list[str] = []
        assert [r.pid for r in services.up(params, HEADERS, say=again.append)] == [r.pid for r in running]
        assert sum("already runs" in line for line in again) == 5  # nothing started twice
        assert services.supervisor(params).pid == boss.pid
        with pytest.raises(services.ServiceError, match="run with another config"):
            services.up(tiny_params(tmp_path), HEADERS)  # the overrides forgotten: the services would disagree
        assert load_params(effective) == params and all(alive(r.pid) for r in running)
    finally:
        lines: list[str] = []
        stopped = services.down(params, say=lines.append)
    assert lines[0] == f"supervisor stopped (pid {boss.pid})"  # first, so that nothing comes back
    assert stopped == ["runner", "broker", "receiver", "mlflow", "prefect"]
    assert not any(alive(r.pid) for r in running) and not alive(boss.pid)
    assert not effective.exists() and services.recorded(params) == [] and services.supervisor(params) is None


def test_a_service_killed_after_up_comes_back_and_status_says_why(tmp_path, standins):
    params = overridden(tmp_path)
    running = {r.name: r for r in services.up(params, HEADERS, say=lambda _: None)}
    try:
        os.killpg(running["broker"].pid, 9)
        deadline = time.monotonic() + 30
        while (now := {r.name: r for r in services.recorded(params)})["broker"].state != "answers" \
                or now["broker"].pid == running["broker"].pid:
            assert time.monotonic() < deadline, now["broker"]
            time.sleep(0.2)
        rows = {r.name: (r.restarts, r.reason, up, ok) for r, up, ok in services.status(params, HEADERS)}
        assert rows["broker"] == (1, "killed by SIGKILL", True, True)
        assert rows["prefect"] == (0, "", True, True)
        assert services.watching(params).startswith(f"supervisor (pid {services.supervisor(params).pid}) watching")
        starts = (tmp_path / "standins" / "broker" / "starts").read_text().splitlines()
        assert [line.split()[2:] for line in starts][0] == [line.split()[2:] for line in starts][1]
    finally:
        services.down(params, say=lambda _: None)
    time.sleep(2 * params.services.restart_backoff)
    assert len((tmp_path / "standins" / "broker" / "starts").read_text().splitlines()) == 2  # nothing came back
    assert services.watching(params).startswith("no supervisor runs")


def test_status_and_the_clients_find_the_services_where_up_put_them(tmp_path, standins, monkeypatch):
    params = overridden(tmp_path)
    services.up(params, HEADERS, say=lambda _: None)
    try:
        plain = tiny_params(tmp_path)  # a later command without the overrides
        asked: list[str] = []
        monkeypatch.setattr(services, "answers", lambda url, headers=None: asked.append(url) or True)
        assert [(r.name, up, ok) for r, up, ok in services.status(plain, HEADERS)] == [
            (name, True, True) for name in ("prefect", "mlflow", "receiver", "broker", "runner")]
        assert asked == [s.health for s in standins]  # the plan of the config the services run with
        monkeypatch.setenv(SERVER_ENV, "unset")  # restored after the test
        services.down(params, say=lambda _: None)  # without a Prefect server this process keeps its own settings
        services.up(params, HEADERS, say=lambda _: None)
        prefect = next(r for r in services.recorded(plain) if r.name == "prefect")
        os.kill(services.supervisor(plain).pid, 9)  # nobody to bring it back
        os.killpg(prefect.pid, 9)
        while alive(prefect.pid):
            time.sleep(0.01)
        reached = services.use_servers(plain)
        assert (reached.services, reached.broker) == (params.services, params.broker)
        assert reached.evolution == plain.evolution  # only the services' addresses change
        assert os.environ[SERVER_ENV] == "http://127.0.0.1:5432"
    finally:
        services.down(params, say=lambda _: None)
    assert services.use_servers(plain) is plain  # nothing recorded: the config as given



def test_a_service_that_fails_at_up_stops_the_ones_started_and_names_itself(tmp_path, standins):
    params = overridden(tmp_path)
    services.plan(params, services.write_effective(params), HEADERS)  # the stand-ins, before `up` starts them
    (tmp_path / "standins" / "broker" / "exit").write_text("1")
    # the broker fails once every other service has started, the runner too (it starts when Prefect answers):
    # however slow they start, `up` then has all of them to stop
    (tmp_path / "standins" / "broker" / "exit-after").write_text("prefect mlflow receiver runner")
    with pytest.raises(services.ServiceError, match=r"^broker exited with code 1: port taken \(log: .*broker\.log\)$"):
        services.up(params, HEADERS, say=lambda _: None)
    started = [s for s in standins if (tmp_path / "standins" / s.name / "starts").exists()]
    assert [s.name for s in started] == ["prefect", "mlflow", "receiver", "broker", "runner"]
    pids = [int(line.split()[1]) for s in started for line in
            (tmp_path / "standins" / s.name / "starts").read_text().splitlines()]
    assert not any(alive(pid) for pid in pids)  # `up` stopped what the supervisor had started
    assert services.recorded(params) == [] and services.supervisor(params) is None
