"""``podracer up`` / ``down`` / ``status``: the supervisor of the local services of continuous
training (docs/operations.md).

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
- a runner serving the project's deployments (``flows/deployments.py``).

Every service runs with the config ``up`` computed, overrides included: ``up`` writes it to
``data/services/params.yaml`` and starts each project service with ``-p`` that file, and
``status`` and the CLI's clients (:func:`use_servers`) read the services' addresses from it.
``up`` starts the services in the order above, waits until each answers its health check
(:func:`tasks.health.answers`), and records each PID, URL and log in
``data/services/services.json``. It then registers the MLflow webhook on the receiver (once;
the server caches its webhook list for 60 s, so the first alias move after a fresh ``up`` may
be delivered by the registry poll instead). ``down`` stops exactly those PIDs: SIGTERM to
the process group, a second SIGTERM for the runner (Prefect's ``serve`` pauses only some
deployments on the first), then SIGKILL after a grace period.

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

from tasks.config import Params, load_params
from tasks.errors import PodracerError
from tasks.health import answers
from tasks.settings import SERVER_ENV
from tasks.storage import write_atomic, write_private

WEBHOOK_SECRET_ENV = "PODRACER_WEBHOOK_SECRET"
RUNS_VIEW = "#/experiments?workflowType=machine_learning"
"""MLflow 3.17's UI opens on its GenAI views unless told the workflow is model training."""
HOST = "127.0.0.1"
STATE = "services.json"
EFFECTIVE = "params.yaml"
"""The config the services run with, under ``data/services/``."""
GRACE_SECONDS = 15.0


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


@dataclass(frozen=True)
class Running:
    """A started service as recorded in ``services.json``."""

    name: str
    pid: int
    url: str
    log: str


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
    store = params.registry.tracking_uri
    mlflow_env = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_WEBHOOK_ALLOWED_SCHEMES": "http,https",
                  "MLFLOW_WEBHOOK_ALLOW_PRIVATE_IPS": "true",
                  "MLFLOW_WEBHOOK_SECRET_ENCRYPTION_KEY": webhook_key(params)}
    clients = {**prefect_env, "MLFLOW_TRACKING_URI": mlflow_url(params), SERVER_ENV: mlflow_url(params),
               "PREFECT_RUNNER_POLL_FREQUENCY": "2", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
               "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}  # a down server fails a flow in seconds, not minutes
    podracer = [sys.executable, "-m", "flows.cli"]
    return [
        Service("prefect", [str(bin_dir / "prefect"), "server", "start", "--host", HOST, "--port",
                            str(cfg.prefect_port)], prefect_env, f"http://{HOST}:{cfg.prefect_port}",
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
                f"http://{HOST}:{cfg.prefect_port}/deployments",
                f"{prefect_api(params)}/deployments/name/trade/session", {},  # serve() makes it last
                cfg.start_timeout),
    ]


def recorded(params: Params) -> list[Running]:
    path = folder(params) / STATE
    if not path.exists():
        return []
    try:
        return [Running(**item) for item in json.loads(path.read_text())]
    except (ValueError, TypeError) as err:
        raise ServiceError(f"{path}: not a services record ({err}); remove it after stopping the services") from err


def _record(params: Params, running: list[Running]) -> None:
    write_atomic(folder(params) / STATE, json.dumps([asdict(r) for r in running], indent=1))


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie child of this process does not count)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait(service: Service, child: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + service.timeout
    while not answers(service.health, service.headers):
        if child.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["(empty log)"]
            raise ServiceError(f"{service.name} exited with code {child.returncode}: {tail[0]} (log: {log})")
        if time.monotonic() > deadline:
            raise ServiceError(f"{service.name} did not answer {service.health} within {service.timeout:.0f} s "
                               f"(log: {log})")
        time.sleep(0.3)


def up(params: Params, broker_headers: Mapping[str, str], say: Callable[[str], None] = print) -> list[Running]:
    """Start every service that is not already running, each with ``params`` (written to
    ``data/services/params.yaml``); return all of them, as recorded. Services that run with
    another config are a :class:`ServiceError`: the services would disagree on their addresses."""
    home = folder(params)
    home.mkdir(parents=True, exist_ok=True)
    running = [r for r in recorded(params) if alive(r.pid)]
    names = {r.name for r in running}
    if running and effective(params) != params:
        raise ServiceError(f"{', '.join(sorted(names))} run with another config ({home / EFFECTIVE}): give `up` "
                           "the same file and overrides, or `podracer down` first")
    try:
        for service in plan(params, write_effective(params), broker_headers):
            if service.name in names:
                say(f"{service.name} already runs (pid {next(r.pid for r in running if r.name == service.name)})")
                continue
            log = home / f"{service.name}.log"
            with log.open("ab") as out:
                child = subprocess.Popen(service.command, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env={**os.environ, **service.env},
                                         start_new_session=True)
            running.append(Running(service.name, child.pid, service.url, str(log)))
            _record(params, running)  # recorded before the wait, so that `down` can stop a slow starter
            began = time.monotonic()
            _wait(service, child, log)
            say(f"{service.name} answers at {service.url} (pid {child.pid}, {time.monotonic() - began:.1f} s)")
        ensure_webhook(params)
    except BaseException:
        down(params, say=lambda _: None)
        raise
    return running


WEBHOOK_NAME = "podracer-champion"
ALIAS_CREATED = "model_version_alias.created"


def ensure_webhook(params: Params) -> str:
    """The MLflow webhook that posts alias moves to the receiver, made or updated once."""
    from mlflow import MlflowClient
    from mlflow.entities.webhook import WebhookEvent

    store = MlflowClient(mlflow_url(params), mlflow_url(params))
    url, event = f"{receiver_url(params)}/webhook", WebhookEvent.from_str(ALIAS_CREATED)
    for hook in store.list_webhooks():
        if hook.name == WEBHOOK_NAME:
            if hook.url != url:
                store.update_webhook(hook.webhook_id, url=url, secret=webhook_secret(params))
            return hook.webhook_id
    return store.create_webhook(WEBHOOK_NAME, url, [event], description="champion alias moves -> Prefect event",
                                secret=webhook_secret(params)).webhook_id


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


def _signal(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # each service leads its own session: its children go too
    except ProcessLookupError:
        pass


def down(params: Params, say: Callable[[str], None] = print) -> list[str]:
    """Stop exactly the recorded services, last started first: gracefully, then for sure."""
    stopped = []
    for service in reversed(recorded(params)):
        if alive(service.pid):
            _signal(service.pid, signal.SIGTERM)
            deadline = time.monotonic() + GRACE_SECONDS
            second = service.name == "runner"
            while alive(service.pid) and time.monotonic() < deadline:
                time.sleep(0.2)
                if second:
                    _signal(service.pid, signal.SIGTERM)
                    second = False
            if alive(service.pid):
                _signal(service.pid, signal.SIGKILL)
                while alive(service.pid):
                    time.sleep(0.05)
            say(f"{service.name} stopped (pid {service.pid})")
        stopped.append(service.name)
    (folder(params) / STATE).unlink(missing_ok=True)
    (folder(params) / EFFECTIVE).unlink(missing_ok=True)
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
