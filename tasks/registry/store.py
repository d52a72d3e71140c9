"""The MLflow store the registry stage writes to: tracking, model registry and artifacts.

Every registry call goes through :func:`client`, which points MLflow at the configured
store first; a client made before that would talk to MLflow's default store instead.
When ``PODRACER_TRACKING_URI`` is set (``podracer up`` sets it for its runner, and the CLI
while the services run) the tracking server is the store: writes then go through the
server, so its registry webhooks fire (docs/operations.md). Otherwise ``registry.tracking_uri``.
(Not ``MLFLOW_TRACKING_URI``: ``mlflow.set_tracking_uri`` writes that one itself.)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from tasks.config import RegistryParams
from tasks.errors import PodracerError
from tasks.health import answers
from tasks.settings import SERVER_ENV

if TYPE_CHECKING:
    from mlflow import MlflowClient


KIND_TAG, KIND = "mlflow.experimentKind", "custom_model_development"
"""Opens the experiment on its training runs: MLflow 3.17 opens others on the GenAI overview."""


class TrackingDown(PodracerError):
    """The MLflow tracking server does not answer: a cycle stops before registering."""


def tracking_uri(registry: RegistryParams) -> str:
    """The tracking server's URL when ``PODRACER_TRACKING_URI`` is set, else the configured store."""
    return os.environ.get(SERVER_ENV) or registry.tracking_uri


_CONNECTED: dict[tuple[str, str], str] = {}
"""(store, experiment) → experiment id, for the stores this process has connected to: the
trading loop asks the registry for its alias every bar, and looking the experiment up each
time cost more than the lookup itself (a week of minute bars: 1,380 bars)."""


def connect(registry: RegistryParams) -> str:
    """Point MLflow at the store; create the experiment with local artifacts, for model training.

    Returns the experiment id. A relative ``sqlite:///`` path is relative to the working
    directory, like every other path in the config. The experiment is looked up once per
    process and store (a ``sqlite:///`` store is named by its absolute path).
    """
    import mlflow

    uri = tracking_uri(registry)
    known = (str(Path(uri.removeprefix("sqlite:///")).resolve()) if uri.startswith("sqlite:///") else uri,
             registry.experiment)
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    if known in _CONNECTED:
        return _CONNECTED[known]
    if uri.startswith("sqlite:///"):
        Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    found = mlflow.get_experiment_by_name(registry.experiment)
    if found is None:
        registry.artifact_root.mkdir(parents=True, exist_ok=True)
        experiment_id = mlflow.create_experiment(registry.experiment,
                                                 artifact_location=registry.artifact_root.resolve().as_uri())
    else:
        experiment_id = found.experiment_id
    if found is None or found.tags.get(KIND_TAG) != KIND:
        mlflow.MlflowClient(uri, uri).set_experiment_tag(experiment_id, KIND_TAG, KIND)
    _CONNECTED[known] = experiment_id
    return experiment_id


def client(registry: RegistryParams) -> MlflowClient:
    """A client of the store (connected first)."""
    from mlflow import MlflowClient

    connect(registry)
    uri = tracking_uri(registry)
    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def check_tracking(registry: RegistryParams) -> None:
    """Fail in one line, before anything is registered, when the tracking server is down
    (a ``sqlite:///`` store needs no server)."""
    uri = tracking_uri(registry)
    if uri.startswith("http") and not answers(f"{uri}/health", timeout=5.0):
        raise TrackingDown(f"MLflow tracking server {uri} does not answer: nothing registered; "
                           "the next cycle will retry")
