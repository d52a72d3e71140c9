"""Prefect cache keys built from the data version (DESIGN §4: never from DataFrames).

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
from tasks.ingest import current_version

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
