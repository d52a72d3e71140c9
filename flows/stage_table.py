"""The one table of the pipeline's steps: what each runs, what its command says and prints,
how the flow caches it and what it reads.

The flow runs eight steps, ingest → validate → features → train → backtest → gate →
register → deliver (docs/design.md, stages and seams). Seven are stages with a ``podracer``
command of their own; the gate is a step of the flow only, which ``podracer register`` runs
inside it. The first six commands are ``dvc.yaml``'s stages. Everything that lists the steps
reads them here: the CLI's stage commands and their help (:mod:`flows.cli`), the flows'
Prefect tasks (:mod:`flows.stages`, chained by :mod:`flows.pipeline`), and the test that holds
``dvc.yaml`` to this table (tests/test_dvc.py: every DVC stage runs its command and lists what
the stage reads).

It is a module of its own rather than part of :mod:`flows.stages` because the CLI reads it,
and a stage command starts without Prefect (which :mod:`flows.stages` imports) or torch: each
step names its function by import path, imported only when the step runs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from rich.console import Group, RenderableType
from rich.markup import escape

from tasks.caching import KeyFn, data_cache_key
from tasks.config import Params
from tasks.config_data import SourceName
from trainers.algorithms import ALGORITHMS

Reads = Callable[[Params], list[Path]]


@dataclass(frozen=True)
class Stage:
    """One step of the pipeline."""

    name: str
    runs: str
    """The plain function in ``tasks/`` it runs, as ``module:function``; it takes ``params`` first."""
    help: str
    """One line: what it does (the command's help)."""
    summary: Callable[[Any], RenderableType] | None
    """What ``podracer <name>`` prints after it, from its result; None: no command of its own."""
    reads: Reads
    """The files and folders it reads, under the config's paths: ``dvc.yaml`` lists each as a dependency."""
    cache_key: KeyFn | None = None
    """The flow's cache key of its result (:mod:`tasks.caching`); None: it runs every time."""
    trains: bool = False
    """It draws training's progress bar and takes ``--profile`` and ``--resume``."""
    repro: bool = True
    """A ``dvc.yaml`` stage (only when it has a command)."""

    @property
    def command(self) -> bool:
        """``podracer <name>`` runs it."""
        return self.summary is not None

    def function(self) -> Callable[..., Any]:
        """The stage function, imported now."""
        module, name = self.runs.split(":")
        fn: Callable[..., Any] = getattr(importlib.import_module(module), name)
        return fn


def _ingested(r: Any) -> str:
    return (f"[green]✓ ingest[/] {r.rows} rows, {r.symbols} symbols, "
            f"data version {r.data_version}{' (reused)' if r.reused else ''}")


def _validated(r: Any) -> str:
    splits = f"; [yellow]{r.splits} suspected split(s): use split-adjusted data[/]" if r.splits else ""
    ragged = (f"; [yellow]{r.masked_beyond_warmup} symbol-bars masked beyond warm-up, {len(r.never_tradable)} "
              f"symbol(s) never tradable (see the report's Coverage)[/]" if r.masked_beyond_warmup or r.never_tradable
              else "")
    return (f"[green]✓ validate[/] {r.rows_out} of {r.rows_in} rows passed, {r.quarantined} quarantined; "
            f"report {r.report}{splits}{ragged}")


def _featured(r: Any) -> str:
    splits = ", ".join(f"{k} {a}..{b}" for k, (a, b) in r.splits.items())
    return f"[green]✓ features[/] {r.bars} bars x {r.symbols} symbols x {len(r.feature_names)} indicators; {splits}"


def _trained(r: Any) -> str:
    return f"[green]✓ train[/] {r.describe()}" + (f"; profile {r.profile}" if r.profile else "")


def _tested(r: Any) -> Group:
    from flows.summary import metrics_table

    return Group(metrics_table(r), f"[green]✓ backtest[/] plot {r.plot}")


def _registered(r: Any) -> str:
    return (f"[green]✓ register[/] {r.model_name} version {r.version} alias {', '.join(r.aliases)} "
            f"({escape(r.reason)}); run {r.run_id}")


def _delivered(r: Any) -> Group:
    from flows.summary import traded

    return traded(r)


def _backtest_files(p: Params) -> list[Path]:
    from tasks.model.backtest import CURVE_FILE, METRICS_FILE, PLOT_FILE

    return [p.dirs.backtest / name for name in (METRICS_FILE, CURVE_FILE, PLOT_FILE)]


def _registry_store(p: Params) -> list[Path]:
    """The registry's local store (params.yaml ``registry:``): the tracking database, when it
    is a sqlite file, and the artifact folder the champion's bundle is fetched from."""
    uri = p.registry.tracking_uri
    return [*([Path(uri.removeprefix("sqlite:///"))] if uri.startswith("sqlite:///") else []),
            p.registry.artifact_root]


def _gate_reads(p: Params) -> list[Path]:
    return [p.dirs.features, *_backtest_files(p), *_registry_store(p)]


def _register_reads(p: Params) -> list[Path]:
    from tasks.data.validate import REPORT

    return [*_gate_reads(p), p.dirs.models, p.dirs.quarantine / REPORT]


_LEARNERS = ", ".join(name.upper() for name in ALGORITHMS)
_SOURCES = ", ".join(get_args(SourceName))

STAGES: dict[str, Stage] = {stage.name: stage for stage in (
    Stage("ingest", "tasks.data.ingest:ingest",
          f"Stage 1: bars from data.source ({_SOURCES}) into data/raw/.", _ingested, lambda p: []),
    Stage("validate", "tasks.data.validate:validate",
          "Stage 2: the Great Expectations suite; bad rows to data/quarantine/.", _validated,
          lambda p: [p.dirs.raw],
          # features: the report's coverage depends on features.min_history
          data_cache_key(("validation", "features"), lambda p: [p.dirs.validated, p.dirs.quarantine])),
    Stage("features", "tasks.data.features:features",
          "Stage 3: indicators, date splits and train-only normalisation.", _featured,
          lambda p: [p.dirs.validated],
          data_cache_key(("validation", "features"), lambda p: [p.dirs.validated, p.dirs.features])),
    Stage("train", "tasks.model.train:train",
          f"Stage 4: a population of any registered learner ({_LEARNERS}), by generational evolution or a "
          "tournament (evolution.mode); its best agent, or an ensemble of the top k (registry.ensemble).",
          _trained, lambda p: [p.dirs.features, p.dirs.raw], trains=True),
    Stage("backtest", "tasks.model.backtest:backtest",
          "Stage 5: the trained policy on the test window, beside buy-and-hold.", _tested,
          lambda p: [p.dirs.features, p.dirs.models]),
    Stage("gate", "tasks.registry.gate:gate_report",
          "The gate of stage 6: the backtest against buy-and-hold and the sitting champion (paired bootstrap test).",
          None, _gate_reads),
    Stage("register", "tasks.registry.register:register",
          "Stage 6: MLflow run and registered model; the gate decides champion, shadow or challenger.", _registered,
          _register_reads),
    Stage("deliver", "tasks.delivery.client.deliver:deliver",
          "Stage 7: one trading cycle: the champion trades the latest bar on the paper broker.", _delivered,
          _registry_store, repro=False),
)}
"""The flow's steps, in the order it runs them."""

COMMANDS: list[Stage] = [stage for stage in STAGES.values() if stage.command]
"""The stages with a ``podracer`` command, in order."""
