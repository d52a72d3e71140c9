"""``podracer up`` / ``down`` / ``status``: the local services of continuous training and the
supervisor that keeps them alive (docs/operations.md).

Five child processes on 127.0.0.1, each in a session of its own with its log under
``data/services/<name>.log``:

- a Prefect server, its database under ``data/services/prefect`` (``PREFECT_HOME``);
- an MLflow tracking server on the project's ``mlflow/`` sqlite store and artifacts, with
  webhooks allowed to a local receiver, a persistent webhook encryption key (without one the
  key changes at each restart and deliveries fail silently) and job execution off (it would
  start seven more processes);
- the webhook receiver (``podracer receiver``): MLflow's signed ``model_version_alias.created``
  deliveries become Prefect events (``tasks/registry/webhook.py``);
- the local paper broker (``podracer broker``);
- a runner serving the project's deployments (``flows/deployments.py``), with Prefect's
  runner webserver on ``services.runner_port`` as its health check.

Every service runs with the config ``up`` computed, overrides included: ``up`` writes it to
``data/services/params.yaml`` and starts each project service with ``-p`` that file, and
``status`` and the CLI's clients (:func:`use_servers`) read the services' addresses from it.
``up`` writes the plan (commands, environments, health checks and restart limits) to
``data/services/plan.json`` (0600: it holds the webhook secrets) and leaves one process
behind, the supervisor (:mod:`deploy.local.supervisor`). The supervisor starts the services together,
the runner once Prefect answers its health check (:func:`tasks.health.answers`),
records each PID, URL, log and restart count in ``data/services/services.json``, and then
restarts any that dies or stops answering. ``up`` follows that record and prints each service
as it answers (the CLI then registers the MLflow webhook:
:func:`deploy.local.webhook.ensure_webhook`). ``down`` stops the supervisor first, so that nothing comes back, then
exactly the recorded PIDs: SIGTERM to the process group, a second SIGTERM for the runner
(Prefect's ``serve`` pauses only some deployments on the first), then SIGKILL after a grace
period.

The services are started by command line, so this module imports no part of the pipeline:
the broker's API keys, which its health check needs, are the caller's to pass.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from deploy.local.processes import alive, stop
from tasks.config import Params, load_params
from tasks.config_ops import ServicesParams
from tasks.errors import PodracerError
from tasks.health import answers
from tasks.settings import SERVER_ENV
from tasks.storage import write_atomic, write_private

WEBHOOK_SECRET_ENV = "PODRACER_WEBHOOK_SECRET"
LEASES = "prefect.server.concurrency.lease_storage.filesystem"
"""Concurrency-slot leases kept on disk under ``PREFECT_HOME``: with Prefect's default (in
memory) a server killed while a CT cycle holds its slot forgets the lease, the slot is never
freed, and no cycle runs again."""
RUNS_VIEW = "#/experiments?workflowType=machine_learning"
"""MLflow 3.17's UI opens on its GenAI views unless told the workflow is model training."""
HOST = "127.0.0.1"
STATE = "services.json"
EFFECTIVE = "params.yaml"
"""The config the services run with, under ``data/services/``."""
SUPERVISOR = "supervisor.json"
"""The supervisor's PID, phase and failure, written by the supervisor alone."""
PLAN = "plan.json"
STOPPED_TWICE = frozenset({"runner"})
"""Services stopped with a second SIGTERM: Prefect's ``serve`` pauses only some of its
deployments on the first (docs/operations.md)."""


class ServiceError(PodracerError):
    """A service did not start, or the recorded services are not this project's."""


@dataclass(frozen=True)
class Service:
    """One service: how to start it and how to tell that it answers."""

    name: str
    command: list[str]
    env: dict[str, str]
    url: str  # what a person opens
    health: str  # a GET that answers 200 once it serves
    headers: dict[str, str]
    timeout: float  # seconds to wait for the health check
    needs: tuple[str, ...] = ()  # services its health check goes through: not judged while they are down


@dataclass(frozen=True)
class Running:
    """A started service as recorded in ``services.json``."""

    name: str
    pid: int
    url: str
    log: str
    state: str = "starting"  # starting, answers, restarting, gave up
    restarts: int = 0  # by the supervisor, since `up`
    reason: str = ""  # why it last restarted, or why the supervisor gave up on it
    took: float = 0.0  # seconds from its last start to its first answer


def folder(params: Params) -> Path:
    return params.data_dir / "services"


def _secret(path: Path, make: Callable[[], str]) -> str:
    """A secret kept in a 0600 file, made once (so it survives restarts)."""
    if not path.exists():
        write_private(path, make())
    return path.read_text().strip()


def webhook_key(params: Params) -> str:
    """The MLflow server's webhook-secret encryption key (a Fernet key)."""
    return _secret(folder(params) / "mlflow-webhook.key", lambda: base64.urlsafe_b64encode(os.urandom(32)).decode())


def webhook_secret(params: Params) -> str:
    """The HMAC secret MLflow signs webhook deliveries with and the receiver checks."""
    return _secret(folder(params) / "webhook-secret", lambda: secrets.token_urlsafe(32))


def receiver_url(params: Params) -> str:
    return f"http://{HOST}:{params.services.receiver_port}"


def prefect_api(params: Params) -> str:
    return f"http://{HOST}:{params.services.prefect_port}/api"


def mlflow_url(params: Params) -> str:
    return f"http://{HOST}:{params.services.mlflow_port}"


def write_effective(params: Params) -> Path:
    """Write ``params`` (the config ``up`` computed, overrides included) for the services to
    load, atomically; return its path."""
    path = folder(params) / EFFECTIVE
    write_atomic(path, yaml.safe_dump(params.model_dump(mode="json"), sort_keys=False))
    return path


def effective(params: Params) -> Params:
    """The config the recorded services run with, or ``params`` when ``up`` wrote none."""
    path = folder(params) / EFFECTIVE
    return load_params(path) if path.exists() else params


def plan(params: Params, params_file: Path, broker_headers: Mapping[str, str]) -> list[Service]:
    """The services of ``podracer up``, in start order; the project's own services load
    ``params_file``, which must hold ``params``. ``broker_headers`` are the API-key headers
    the broker's health check sends."""
    bin_dir = Path(sys.executable).parent
    home = folder(params)
    cfg = params.services
    prefect_env = {"PREFECT_HOME": str(home / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
                   "PREFECT_API_URL": prefect_api(params)}
    server_env = {**prefect_env, "PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE": LEASES}
    store = params.registry.tracking_uri
    mlflow_env = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_WEBHOOK_ALLOWED_SCHEMES": "http,https",
                  "MLFLOW_WEBHOOK_ALLOW_PRIVATE_IPS": "true",
                  "MLFLOW_WEBHOOK_SECRET_ENCRYPTION_KEY": webhook_key(params)}
    clients = {**prefect_env, "MLFLOW_TRACKING_URI": mlflow_url(params), SERVER_ENV: mlflow_url(params),
               "PREFECT_RUNNER_POLL_FREQUENCY": "2", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
               "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",  # a down server fails a flow in seconds, not minutes
               "PREFECT_RUNNER_SERVER_ENABLE": "true", "PREFECT_RUNNER_SERVER_HOST": HOST,
               "PREFECT_RUNNER_SERVER_PORT": str(cfg.runner_port)}  # its /health: 200 while it polls
    podracer = [sys.executable, "-m", "flows.cli"]
    return [
        Service("prefect", [str(bin_dir / "prefect"), "server", "start", "--host", HOST, "--port",
                            str(cfg.prefect_port)], server_env, f"http://{HOST}:{cfg.prefect_port}",
                f"{prefect_api(params)}/health", {}, cfg.start_timeout),
        Service("mlflow", [str(bin_dir / "mlflow"), "server", "--backend-store-uri", store,
                           "--artifacts-destination", str(params.registry.artifact_root), "--host", HOST, "--port",
                           str(cfg.mlflow_port), "--workers", "1"], mlflow_env, f"{mlflow_url(params)}/{RUNS_VIEW}",
                f"{mlflow_url(params)}/health", {}, cfg.start_timeout),
        Service("receiver", [*podracer, "receiver", "-p", str(params_file)],
                {**prefect_env, WEBHOOK_SECRET_ENV: webhook_secret(params)}, receiver_url(params),
                f"{receiver_url(params)}/health", {}, cfg.start_timeout),
        Service("broker", [*podracer, "broker", "-p", str(params_file)], {}, f"http://{HOST}:{params.broker.port}",
                f"http://{HOST}:{params.broker.port}/v2/clock", dict(broker_headers), cfg.start_timeout),
        Service("runner", [sys.executable, "-m", "flows.deployments", "-p", str(params_file)], clients,
                f"http://{HOST}:{cfg.prefect_port}/deployments", f"http://{HOST}:{cfg.runner_port}/health", {},
                cfg.start_timeout, needs=("prefect",)),  # it answers once it has polled the server
    ]


def recorded(params: Params) -> list[Running]:
    return read_record(folder(params))


def read_record(home: Path) -> list[Running]:
    path = home / STATE
    if not path.exists():
        return []
    try:
        return [Running(**item) for item in json.loads(path.read_text())]
    except (ValueError, TypeError) as err:
        raise ServiceError(f"{path}: not a services record ({err}); remove it after stopping the services") from err


def write_record(home: Path, running: list[Running]) -> None:
    write_atomic(home / STATE, json.dumps([asdict(r) for r in running], indent=1))


@dataclass(frozen=True)
class Boss:
    """The supervisor as it records itself in ``supervisor.json``."""

    pid: int
    phase: str  # starting (the services), watching, failed
    failure: str = ""
    log: str = ""
    asked: int = 0  # the requests of `up` (SIGUSR1) it has acted on


def supervisor(params: Params) -> Boss | None:
    """The supervisor's record, or None when there is none."""
    path = folder(params) / SUPERVISOR
    try:
        return Boss(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def write_plan(home: Path, services: list[Service], cfg: ServicesParams) -> Path:
    """The plan the supervisor runs, 0600 (the services' environments hold the webhook secrets)."""
    path = home / PLAN
    path.unlink(missing_ok=True)
    write_private(path, json.dumps({"services": [asdict(s) for s in services], "limits": cfg.model_dump()}))
    return path


def up(params: Params, broker_headers: Mapping[str, str], say: Callable[[str], None] = print) -> list[Running]:
    """Start the supervisor with the plan of ``params`` (written to ``data/services/params.yaml``),
    or ask the one running to start what is not running; return every service once each
    answers, as recorded. Services that run with another config are a :class:`ServiceError`:
    the services would disagree on their addresses."""
    home = folder(params)
    home.mkdir(parents=True, exist_ok=True)
    boss = supervisor(params)
    boss = boss if boss is not None and alive(boss.pid) else None
    running = [r for r in recorded(params) if alive(r.pid)]
    if (boss or running) and effective(params) != params:
        raise ServiceError(f"{', '.join(sorted(r.name for r in running)) or 'the supervisor'} run with another "
                           f"config ({home / EFFECTIVE}): give `up` the same file and overrides, or "
                           "`podracer down` first")
    services = plan(params, write_effective(params), broker_headers)
    for r in running:
        if r.state == "answers":
            say(f"{r.name} already runs (pid {r.pid})")
    shown = {r.name for r in running if r.state == "answers"}
    if boss is not None:
        os.kill(boss.pid, signal.SIGUSR1)  # start again any service it gave up on
        deadline = time.monotonic() + 30
        while (now := supervisor(params)) is None or now.asked <= boss.asked:
            if not alive(boss.pid) or time.monotonic() > deadline:
                raise ServiceError(f"the supervisor (pid {boss.pid}) did not answer `up` (log: {boss.log})")
            time.sleep(0.1)
        return _follow(params, services, boss.pid, shown, say)
    write_plan(home, services, params.services)
    write_record(home, running)  # a dead service's old record must not read as answering
    (home / SUPERVISOR).unlink(missing_ok=True)
    with (home / "supervisor.log").open("ab") as out:
        child = subprocess.Popen([sys.executable, "-m", "deploy.local.supervisor", str(home)], stdout=out,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        return _follow(params, services, child.pid, shown, say)
    except BaseException:
        down(params, say=lambda _: None, boss=child.pid)
        raise


def _follow(params: Params, services: list[Service], boss: int, shown: set[str],
            say: Callable[[str], None]) -> list[Running]:
    """Print each service as the supervisor records it answering, and return once every one
    answers and the supervisor watches them; raise the supervisor's failure, or a service it
    gave up on."""
    budget = sum(s.timeout for s in services) + 60
    deadline = time.monotonic() + budget
    while True:
        state = {r.name: r for r in recorded(params)}
        for service in services:
            r = state.get(service.name)
            if r is not None and r.state == "answers" and service.name not in shown and alive(r.pid):
                say(f"{service.name} answers at {service.url} (pid {r.pid}, {r.took:.1f} s)")
                shown.add(service.name)
            elif r is not None and r.state == "gave up":
                raise ServiceError(f"{service.name}: {r.reason} (log: {r.log})")
        record = supervisor(params)
        if len(shown) == len(services) and record is not None and record.phase == "watching":
            return [state[s.name] for s in services]
        if record is not None and record.phase == "failed":
            raise ServiceError(record.failure)
        if not alive(boss):
            raise ServiceError(f"the supervisor exited (log: {folder(params) / 'supervisor.log'})")
        if time.monotonic() > deadline:
            raise ServiceError(f"not every service answered within {budget:.0f} s (logs: {folder(params)})")
        time.sleep(0.3)


_PROCESS = contextlib.ExitStack()
"""Settings that hold for the rest of the process (never closed)."""


def use_servers(params: Params) -> Params:
    """Point this process's clients at the services ``podracer up`` recorded: the Prefect API
    when it runs, and the MLflow tracking server even when it has died, so that registry
    writes go through the server (its webhooks fire) or fail, never around it. Returns
    ``params`` with the services' addresses (the ``services`` and ``broker`` sections they
    run with), so that this process reaches them even when ``up`` was given overrides."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    running = {r.name: alive(r.pid) for r in recorded(params)}
    if not running:
        return params
    served = effective(params)
    if "mlflow" in running:
        os.environ[SERVER_ENV] = mlflow_url(served)
    if running.get("prefect"):
        os.environ["PREFECT_API_URL"] = prefect_api(served)  # for child processes; this one read its settings
        _PROCESS.enter_context(temporary_settings(updates={PREFECT_API_URL: prefect_api(served)}))  # at import
    return params.model_copy(update={"services": served.services, "broker": served.broker})


def down(params: Params, say: Callable[[str], None] = print, boss: int | None = None) -> list[str]:
    """Stop the supervisor (``boss``, or the recorded one), so that nothing comes back, then
    exactly the recorded services, last started first: gracefully, then for sure."""
    home = folder(params)
    record = supervisor(params)
    for pid in {p for p in (boss, record.pid if record else None) if p is not None}:
        if alive(pid):
            stop(pid, grace=10.0)
            say(f"supervisor stopped (pid {pid})")
    stopped = []
    for service in reversed(recorded(params)):
        if alive(service.pid):
            stop(service.pid, twice=service.name in STOPPED_TWICE)
            say(f"{service.name} stopped (pid {service.pid})")
        stopped.append(service.name)
    for name in (STATE, EFFECTIVE, SUPERVISOR, PLAN):
        (home / name).unlink(missing_ok=True)
    return stopped


def status(params: Params, broker_headers: Mapping[str, str]) -> list[tuple[Running, bool, bool]]:
    """Each recorded service, whether its process runs and whether it answers its health
    check (at the address it was started on)."""
    served = effective(params)
    checks = {s.name: s for s in plan(served, folder(params) / EFFECTIVE, broker_headers)}
    out = []
    for service in recorded(params):
        check = checks.get(service.name)
        up_now = alive(service.pid)
        out.append((service, up_now, up_now and check is not None and answers(check.health, check.headers)))
    return out


def watching(params: Params) -> str:
    """One line on the supervisor: who watches the services, or that nobody does."""
    record = supervisor(params)
    if record is None or not alive(record.pid):
        return "no supervisor runs: a service that dies stays down (`podracer up` starts it again)"
    if record.phase == "failed":
        return f"supervisor (pid {record.pid}) failed: {record.failure}"
    return f"supervisor (pid {record.pid}) {record.phase}; log {record.log}"
