"""The MLflow store the registry stage writes to: tracking, model registry and artifacts.

Every registry call goes through :func:`client`, which points MLflow at the configured
store first; a client made before that would talk to MLflow's default store instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tasks.config import RegistryParams

if TYPE_CHECKING:
    from mlflow import MlflowClient


def connect(registry: RegistryParams) -> str:
    """Point MLflow at the configured store; create the experiment with local artifacts.

    Returns the experiment id. A relative ``sqlite:///`` path is relative to the working
    directory, like every other path in the config.
    """
    import mlflow

    if registry.tracking_uri.startswith("sqlite:///"):
        Path(registry.tracking_uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    mlflow.set_tracking_uri(registry.tracking_uri)
    mlflow.set_registry_uri(registry.tracking_uri)
    found = mlflow.get_experiment_by_name(registry.experiment)
    if found is not None:
        return found.experiment_id
    registry.artifact_root.mkdir(parents=True, exist_ok=True)
    return mlflow.create_experiment(registry.experiment, artifact_location=registry.artifact_root.resolve().as_uri())


def client(registry: RegistryParams) -> MlflowClient:
    """A client of the configured store (connected first)."""
    from mlflow import MlflowClient

    connect(registry)
    return MlflowClient(tracking_uri=registry.tracking_uri, registry_uri=registry.tracking_uri)
