"""Pipeline stages as plain functions (docs/design.md, stages and seams).

The subpackages follow the data flow, and a lower one never imports a higher one:
``data`` (ingest, validate, features) ← ``model`` (train, backtest) ← ``registry``
(register, the gate, the pyfunc) ← ``delivery`` (the paper broker and deliver). What every
part uses sits here: ``config``, ``errors``, ``storage`` and ``caching`` (the data version
and cache keys). The plain functions import no Prefect and are testable without a server;
``flows/`` composes their task wrappers and ``dvc.yaml`` runs the same functions through the CLI.
The local services of ``podracer up`` are no stage: they live in ``deploy/local/``.
"""
