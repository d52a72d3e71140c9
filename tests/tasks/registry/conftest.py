"""The registry tests' shared store: a sqlite MLflow registry in ``tmp_path``."""

from __future__ import annotations

import pytest

from tasks.config import RegistryParams
from tasks.registry.store import client


@pytest.fixture
def registry(tmp_path) -> RegistryParams:
    """A store with versions 1..3 of a bare registered model, and no aliases."""
    params = RegistryParams(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}", artifact_root=tmp_path / "artifacts")
    store = client(params)
    store.create_registered_model(params.model_name)
    for _ in range(3):
        store.create_model_version(params.model_name, source=str(tmp_path))
    return params
