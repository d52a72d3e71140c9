"""Settings that come from the environment, loaded explicitly by each entry point (docs/operations.md).

``.env`` at the repository root holds the quiet and offline settings (telemetry off,
Prefect's extra loggers, warnings filtered). Nothing loads it when a module is imported:
each entry point calls :func:`load_env_defaults` first, the ``podracer`` command in its
main callback, the deployment runner at the top of its ``main()`` and the tests in their
``conftest.py``. Prefect reads its ``PREFECT_*`` settings when it is imported, so an entry
point loads them before it imports Prefect. A variable the shell already sets wins.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_FILE = Path(__file__).resolve().parents[1] / ".env"
SERVER_ENV = "PODRACER_TRACKING_URI"
"""The MLflow tracking server that registry writes go through, so that its webhooks fire:
``podracer up`` sets it for its services (and the CLI while they run), the registry's
store reads it (``tasks/registry/store.py``). Not ``MLFLOW_TRACKING_URI``, which
``mlflow.set_tracking_uri`` writes itself."""


def env_defaults(path: Path = ENV_FILE) -> dict[str, str]:
    """The ``KEY=VALUE`` lines of ``path`` (``#`` comments skipped); none if it is missing."""
    found = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        key, sep, value = line.partition("=")
        if sep and not key.lstrip().startswith("#"):
            found[key.strip()] = value.strip()
    return found


def load_env_defaults(path: Path = ENV_FILE) -> None:
    """Apply :func:`env_defaults` of ``path`` without overriding the shell."""
    for key, value in env_defaults(path).items():
        os.environ.setdefault(key, value)
