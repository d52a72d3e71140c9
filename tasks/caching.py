"""The data version, and Prefect cache keys built from it (never from DataFrames; docs/design.md, data version).

The data version is a content hash of the raw bar files: ingest reports it, training
stores it in the model bundle, and the register stage logs it to MLflow. It lives here,
beside the cache keys, because every part of the pipeline reads it.

A stage's key is the hash of its name and source, the data folder, the data version of
``data/raw/`` and the config sections it reads. So a rerun with the same data and config
reuses the cached result, and a changed input or config runs the stage again. While any
of the stage's output folders is missing or empty there is no key, so the stage runs (and
re-creates them) rather than returning a result whose files are gone.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tasks.config import Params
from tasks.storage import file_digest


def data_version(files: list[Path]) -> str:
    """Content hash of the raw files (names and bytes), 16 hex characters."""
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(f"{path.name}:{file_digest(path)}\n".encode())
    return digest.hexdigest()[:16]


def current_version(params: Params) -> str:
    """Data version of what is in ``data/raw/`` now."""
    return data_version(sorted(params.dirs.raw.glob("*.parquet")))


KeyFn = Callable[[Any, dict[str, Any]], str | None]


def data_cache_key(sections: tuple[str, ...], outputs: Callable[[Params], list[Path]]) -> KeyFn:
    """A ``cache_key_fn`` for a task whose first parameter is ``params``; ``outputs`` lists
    the folders the stage writes."""

    def key(context: Any, parameters: dict[str, Any]) -> str | None:
        params: Params = parameters["params"]
        if not all(folder.is_dir() and any(folder.iterdir()) for folder in outputs(params)):
            return None
        dump = params.model_dump(mode="json")
        parts = {
            "task": context.task.name,
            "source": hashlib.sha256(inspect.getsource(context.task.fn).encode()).hexdigest(),
            "data_dir": str(params.data_dir.resolve()),
            "data_version": current_version(params),
            "config": {s: dump[s] for s in ("data", *sections)},
        }
        return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()

    return key
