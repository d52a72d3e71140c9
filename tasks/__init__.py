"""Pipeline stages as plain functions (docs/design.md, stages and seams).

The subpackages follow the data flow, and a lower one never imports a higher one:
``data`` (ingest, validate, features) ← ``model`` (train, backtest) ← ``registry``
(register, the gate, the pyfunc) ← ``delivery`` (the paper broker and deliver). What every
part uses sits here: ``config``, ``errors``, ``storage`` and ``caching`` (the data version
and cache keys). The plain functions import no Prefect and are testable without a server;
``flows/`` composes their task wrappers and ``dvc.yaml`` runs the same functions through the CLI.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

MOVED = {"serving": "tasks.registry.serving"}
"""Old module names (under ``tasks``) that stored artifacts still import, and where they live now.

A model version registered before ``tasks/`` was grouped carries a models-from-code file
that imports ``PolicyModel`` from the old ``tasks/serving.py``; this keeps such versions loadable.
"""


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves an old name in :data:`MOVED` to the module that lives at the new path."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        package, _, name = fullname.rpartition(".")
        if package != __name__ or name not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(MOVED[spec.name.rpartition(".")[2]])

    def exec_module(self, module: ModuleType) -> None:
        """The module was executed under its new name already."""


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModules())
