"""Registry versions as the continuous-training cycle reads them: a version's policy bundle
and its data cutoff (docs/operations.md, the CT cycle).

Every version records ``data_cutoff``, the last bar its training and selection saw, as a
version tag, so a later cycle can tell whether the champion has seen its evaluation window.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from tasks.config import Params, RegistryParams
from tasks.errors import MissingInput
from tasks.model import bundle
from tasks.model.walkforward import Champion
from tasks.registry.aliases import champion_version
from tasks.registry.store import client, connect

CUTOFF = "data_cutoff"
CT_FOLDER = "champion"
"""Where a cycle fetches the champion's bundle, under ``data/ct/``."""


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


def current_champion(params: Params) -> Champion | None:
    """The champion a cycle challenges: its bundle fetched into ``data/ct/champion/``, its
    data cutoff and the data version it trained on; None before the first promotion."""
    version = champion_version(params.registry)
    if version is None:
        return None
    folder = fetch_bundle(params.registry, version, params.dirs.ct / CT_FOLDER)
    _, meta = bundle.load(folder)
    return Champion(version, folder, cutoff(params.registry, version), meta.data_version)
