"""Registry versions as the continuous-training cycle reads them: a version's policy bundle
and its data cutoff (issue 13, §3.5).

Every version records ``data_cutoff``, the last bar its training and selection saw, as a
version tag, so a later cycle can tell whether the champion has seen its evaluation window.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tasks.config import RegistryParams
from tasks.errors import MissingInput
from tasks.model import bundle
from tasks.registry.store import client, connect

CUTOFF = "data_cutoff"


def fetch_bundle(registry: RegistryParams, version: str, dest: Path) -> Path:
    """Download ``version``'s policy bundle into ``dest`` (replaced) and return it."""
    import mlflow

    connect(registry)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    try:
        model_dir = Path(mlflow.artifacts.download_artifacts(
            artifact_uri=f"models:/{registry.model_name}/{version}", dst_path=str(dest / "model")))
    except mlflow.exceptions.MlflowException as err:
        raise MissingInput(f"{registry.model_name} version {version}: "
                           f"artifacts not found ({str(err).splitlines()[0]})") from None
    found = sorted(model_dir.glob(f"artifacts/*/{bundle.WEIGHTS}"))
    if not found:
        raise MissingInput(f"{registry.model_name} version {version}: no policy bundle in its artifacts")
    return found[0].parent


def cutoff(registry: RegistryParams, version: str) -> str | None:
    """The version's data cutoff (a date), or None when it was registered without one."""
    tags = client(registry).get_model_version(registry.model_name, version).tags
    return tags.get(CUTOFF)
