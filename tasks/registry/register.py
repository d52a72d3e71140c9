"""Stage 6, register: an MLflow run, a registered pyfunc model and the champion gate.

The run logs the whole config (flattened), the data version and its dataset input, the
backtest metrics next to buy-and-hold, what the data layer dropped or masked
(``data_masked_cells``, ``data_dropped_symbols``, the features' ``coverage.json``;
docs/data.md, what is counted), and the artifacts (equity plot, validation report,
leaderboard). The policy is logged as a :class:`tasks.registry.serving.PolicyModel` pyfunc
and registered. The new version gets the alias ``challenger``; the gate's decision
(:mod:`tasks.registry.decision`, :func:`tasks.registry.gate.gate_report`: the pipeline's
agent faces buy-and-hold and the sitting champion) then makes it ``champion`` or ``shadow``,
and settles the standing shadow (:func:`tasks.registry.shadow.settle`), whose look the
cycle has already recorded.
"""

from __future__ import annotations

import json
import logging
import warnings
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from tasks.config import Params, RegistryParams
from tasks.data import feature_set
from tasks.data.validate import REPORT
from tasks.model import bundle
from tasks.model.backtest import BacktestResult, load_result
from tasks.model.leaderboard import LEADERBOARD, PLOT, log_nested_runs
from tasks.model.train import PROFILE_FILES, SUMMARY, TrainResult
from tasks.registry.aliases import CHALLENGER, CHAMPION, DATA_VERSION, SHADOW
from tasks.registry.decay import Promise
from tasks.registry.decision import Decision
from tasks.registry.gate import GateVerdict, gate_report
from tasks.registry.serving import policy_input
from tasks.registry.shadow import settle
from tasks.registry.store import client, connect
from tasks.registry.tags import MAX_TAG
from tasks.registry.versions import CUTOFF, current_champion

log = logging.getLogger("podracer.register")
POLICY_MODEL_CODE = Path(__file__).with_name("policy_model.py")
COMPLETE = "podracer.complete"


@dataclass(frozen=True)
class RegisterResult:
    run_id: str
    model_name: str
    version: str
    aliases: list[str]
    promoted: bool
    reason: str
    artifact_uri: str
    champion_now: str | None = None
    """The version this registration made champion: this one, or the shadow it promoted."""


def _requirements() -> list[str]:
    import mlflow

    return [f"torch=={torch.__version__.split('+')[0]}", f"mlflow=={mlflow.__version__}",
            f"pandas=={pd.__version__}", f"numpy=={np.__version__}"]


@dataclass(frozen=True)
class Candidate:
    """A model to register and what decided its fate: the pipeline's test-window backtest
    (:func:`pipeline_candidate`), or a continuous-training cycle's window comparison
    (:func:`cycle_candidate`)."""

    model_dir: Path
    metrics: dict[str, dict[str, float]]
    """Logged as ``<key>_<metric>``: ``test`` and ``buy_and_hold`` for the pipeline."""
    decision: Decision
    since: str
    """Date of the last bar of the window the gate judged it on: a shadow's record starts after it."""
    cutoff: str
    """Date of the last bar training and selection saw (the version's ``data_cutoff`` tag)."""
    run_name: str
    origin: str
    """``pipeline`` or ``ct``."""
    report: str = ""
    """Markdown shown as the version's description in the MLflow UI (the gate report)."""
    artifacts: tuple[tuple[str, Path], ...] = ()
    """(artifact folder, file) pairs logged beside the model."""
    tags: tuple[tuple[str, str], ...] = ()

    @property
    def reason(self) -> str:
        return self.decision.line


def pipeline_candidate(params: Params, tested: BacktestResult | None = None,
                       verdict: GateVerdict | None = None) -> Candidate:
    """The pipeline's candidate: the trained bundle of ``data/models/``, its test-split
    backtest and the gate's verdict on it, against buy-and-hold and the sitting champion
    (read from ``data/`` and the registry when not given, as ``podracer register`` does)."""
    dirs = params.dirs
    tested = tested or load_result(dirs.backtest)
    verdict = verdict or gate_report(params, tested, champion=current_champion(params))
    _, meta = bundle.load(dirs.models)
    fs = feature_set.load(dirs.features)
    metrics = {"test": tested.metrics["agent"], "buy_and_hold": tested.buy_and_hold}
    if verdict.compared is not None:
        metrics["champion"] = verdict.compared.metrics["champion"]
    return Candidate(
        model_dir=dirs.models, metrics=metrics,
        decision=verdict.decision, since=tested.end, cutoff=str(fs.timestamps[fs.splits["validation"][1]])[:10],
        run_name=f"pipeline {date.today()} data {meta.data_version[:8]}", origin="pipeline",
        report=verdict.report_markdown,
        artifacts=(*(("backtest", path) for path in tested.files), *(("gate", path) for path in verdict.files)),
        tags=tuple(Promise.of_curve(tested.curve, "agent").tags().items()))


def cycle_candidate(data_version: str, challenger: TrainResult, tested: BacktestResult,
                    verdict: GateVerdict) -> Candidate:
    """A continuous-training cycle's candidate: the challenger, judged on its evaluation
    window, and what the gate decided for the standing shadow (docs/operations.md)."""
    return Candidate(
        model_dir=challenger.model_dir, metrics={f"window_{arm}": m for arm, m in tested.metrics.items()},
        decision=verdict.decision, since=tested.end, cutoff=challenger.cutoff,
        run_name=f"ct {date.today()} data {data_version[:8]}", origin="ct", report=verdict.report_markdown,
        artifacts=tuple(("gate", path) for path in (*verdict.files, *tested.files)),
        tags=(("eval_window", f"{tested.start}..{tested.end}"), ("champion_seen_bars", str(tested.seen)),
              ("warm_start", challenger.start), *Promise.of_curve(tested.curve, "challenger").tags().items()),
    )


def log_dataset(params: Params, data_version: str) -> None:
    """The raw bars as the run's dataset input, so the MLflow UI's Dataset column names it."""
    import mlflow
    from mlflow.data.dataset_source_registry import resolve_dataset_source
    from mlflow.data.meta_dataset import MetaDataset

    with warnings.catch_warnings():  # "source type unspecified": it is a local folder, resolved as one
        warnings.simplefilter("ignore")
        source = resolve_dataset_source(params.dirs.raw.resolve().as_uri())
    mlflow.log_input(MetaDataset(source, name=f"{params.data.source} {params.data.freq} bars",
                                 digest=data_version[:8]), context="training")


def _log_training(folder: Path) -> None:
    import mlflow

    log_nested_runs(pd.read_csv(folder / LEADERBOARD))
    training = json.loads((folder / SUMMARY).read_text())
    mlflow.set_tags({"training.mode": training.pop("mode"), "training.engine": training.pop("engine"),
                     "training.device": training.pop("device")})
    mlflow.log_metrics({f"training_{k}": float(v) for k, v in training.items()})
    for name in (LEADERBOARD, PLOT, SUMMARY, *PROFILE_FILES):  # profiles exist when training ran with --profile
        if (folder / name).exists():
            mlflow.log_artifact(str(folder / name), artifact_path="training")


def log_coverage(features_dir: Path) -> dict[str, float]:
    """Log what the data layer dropped or masked (``coverage.json`` of the feature set) to
    the active run: the file as an artifact under ``data/``, the metrics
    ``data_masked_cells`` and ``data_dropped_symbols``, and the dropped symbols as the tag
    ``data.dropped_symbols``. Returns the metrics; nothing is logged without the file."""
    import mlflow

    path = features_dir / feature_set.COVERAGE
    if not path.exists():
        log.warning("%s: not found, the run does not count masked bars (run `podracer features` again)", path)
        return {}
    summary = json.loads(path.read_text())
    dropped = [str(s) for s in summary.get("dropped_symbols", [])]
    metrics = {"data_masked_cells": float(summary["masked_cells"]), "data_dropped_symbols": float(len(dropped))}
    mlflow.log_metrics(metrics)
    if dropped:
        mlflow.set_tag("data.dropped_symbols", ", ".join(dropped)[:MAX_TAG])
    mlflow.log_artifact(str(path), artifact_path="data")
    return metrics


def register(params: Params, candidate: Candidate | None = None) -> RegisterResult:
    """Log the run and register the model; carry out the gate's decision.

    The version carries its gate verdict, reason, data version, data cutoff, learner
    (``algorithm``: ppo, sac or ensemble, with an ensemble's ``members``) and promise (its
    active return over buy-and-hold on the judged window, the live watch's reference) as tags and
    its gate report as its description. The ``podracer.complete`` tag is written last: a
    version without it was cut off half-way (say, the tracking server died) and the next
    registration deletes it, so no half-registered version survives.
    """
    import mlflow

    candidate = candidate or pipeline_candidate(params)
    registry, folder = params.registry, candidate.model_dir
    _, meta = bundle.load(folder)
    fs = feature_set.load(params.dirs.features)
    store = client(registry)
    experiment_id = connect(registry)
    drop_incomplete(registry)
    decision = candidate.decision
    version_tags = {DATA_VERSION: meta.data_version, CUTOFF: candidate.cutoff, "origin": candidate.origin,
                    "gate": decision.action, "gate_reason": candidate.reason[:MAX_TAG], "algorithm": meta.algorithm,
                    **dict(candidate.tags)}
    if meta.members:  # an ensemble: who is in it, best first
        version_tags["members"] = ", ".join(f"job {m['job']} ({m['algorithm']})" for m in meta.members)[:MAX_TAG]
    with mlflow.start_run(experiment_id=experiment_id, run_name=candidate.run_name) as run:
        mlflow.log_params({**params.flat(), "data_version": meta.data_version})
        mlflow.set_tags({**version_tags, "podracer.stage": "register", COMPLETE: "pending"})
        log_dataset(params, meta.data_version)
        for prefix, values in candidate.metrics.items():
            mlflow.log_metrics({f"{prefix}_{k}": v for k, v in values.items()})
        for artifact_path, path in candidate.artifacts:
            mlflow.log_artifact(str(path), artifact_path=artifact_path)
        _log_training(folder)
        if (params.dirs.quarantine / REPORT).exists():
            mlflow.log_artifact(str(params.dirs.quarantine / REPORT), artifact_path="validation")
        log_coverage(params.dirs.features)
        last = len(fs.timestamps) - 1
        example = policy_input(meta, fs.prices[last], fs.features[last], np.zeros(len(meta.symbols)),
                               meta.env.initial_cash)
        with warnings.catch_warnings():  # order_qty is an integer column by design
            warnings.filterwarnings("ignore", message=".*integer column", category=UserWarning)
            info = mlflow.pyfunc.log_model(
                name="policy",
                python_model=str(POLICY_MODEL_CODE),
                artifacts={"bundle": str(folder)},
                input_example=example,
                pip_requirements=_requirements(),
                registered_model_name=registry.model_name,
            )
        version = str(info.registered_model_version)
    name = registry.model_name
    for key, value in version_tags.items():
        store.set_model_version_tag(name, version, key, value)
    store.update_model_version(name, version, description=candidate.report or candidate.reason)
    store.set_registered_model_alias(name, CHALLENGER, version)
    store.set_model_version_tag(name, version, COMPLETE, "true")
    store.set_tag(run.info.run_id, COMPLETE, "true")
    settle(registry, decision, version, candidate.since)
    aliases = {"promote": [CHAMPION], "shadow": [CHALLENGER, SHADOW], "refuse": [CHALLENGER]}[decision.action]
    said = {"promote": "promoted to champion", "shadow": "trades in shadow", "refuse": "stays challenger"}
    log.info("version %s %s: %s", version, said[decision.action], candidate.reason)
    return RegisterResult(run.info.run_id, name, version, aliases, decision.action == "promote", candidate.reason,
                          run.info.artifact_uri, decision.promoted if decision.promoted != "new" else version)


def drop_incomplete(registry: RegistryParams) -> list[str]:
    """Delete the versions an interrupted registration left without ``podracer.complete``.

    Only versions whose run was started by this code (its ``podracer.complete`` run tag says
    ``pending``) count: versions registered by hand or before the tag existed are kept."""
    store, name = client(registry), registry.model_name
    dropped = [str(v.version) for v in store.search_model_versions(f"name='{name}'")
               if v.tags.get(COMPLETE) != "true" and v.run_id
               and store.get_run(v.run_id).data.tags.get(COMPLETE) == "pending"]
    for version in dropped:
        store.delete_model_version(name, version)
        log.warning("deleted version %s of %s: its registration never finished", version, name)
    return dropped
