"""Stage 6, register: an MLflow run, a registered pyfunc model and the champion gate.

The run logs the whole config (flattened), the data version, the backtest metrics next to
buy-and-hold, and the artifacts (tearsheet, validation report, leaderboard). The policy is
logged as a :class:`tasks.registry.serving.PolicyModel` pyfunc and registered. The new version gets
the alias ``challenger`` and faces the champion gate (:mod:`tasks.registry.gate`).
"""

from __future__ import annotations

import json
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.config import Params
from tasks.data import features
from tasks.data.validate import REPORT
from tasks.errors import MissingInput
from tasks.model import bundle
from tasks.model.backtest import CURVE_FILE, METRICS_FILE, PLOT_FILE
from tasks.model.leaderboard import LEADERBOARD, PLOT, log_nested_runs
from tasks.model.train import PROFILE_FILES, SUMMARY
from tasks.registry.gate import CHALLENGER, CHAMPION, gate, promote
from tasks.registry.serving import policy_input
from tasks.registry.store import client, connect

log = logging.getLogger("podracer.register")
POLICY_MODEL_CODE = Path(__file__).with_name("policy_model.py")


@dataclass(frozen=True)
class RegisterResult:
    run_id: str
    model_name: str
    version: str
    aliases: list[str]
    promoted: bool
    reason: str
    artifact_uri: str


def _requirements() -> list[str]:
    import mlflow

    return [f"torch=={torch.__version__.split('+')[0]}", f"mlflow=={mlflow.__version__}",
            f"pandas=={pd.__version__}", f"numpy=={np.__version__}"]


def register(params: Params) -> RegisterResult:
    """Log the run and register the model; promote it if it passes the gate."""
    import mlflow

    dirs, registry = params.dirs, params.registry
    metrics_path = dirs.backtest / METRICS_FILE
    if not metrics_path.exists():
        raise MissingInput(f"{metrics_path}: not found (run `podracer backtest` first)")
    metrics = json.loads(metrics_path.read_text())
    _, meta = bundle.load(dirs.models)
    fs = features.load(dirs.features)
    experiment_id = connect(registry)
    with mlflow.start_run(experiment_id=experiment_id) as run:
        mlflow.log_params({**params.flat(), "data_version": meta.data_version})
        mlflow.set_tags({"data_version": meta.data_version, "podracer.stage": "register"})
        mlflow.log_metrics({f"test_{k}": v for k, v in metrics["agent"].items()})
        mlflow.log_metrics({f"buy_and_hold_{k}": v for k, v in metrics["buy_and_hold"].items()})
        for name in (METRICS_FILE, CURVE_FILE, PLOT_FILE):
            mlflow.log_artifact(str(dirs.backtest / name), artifact_path="backtest")
        mlflow.log_artifact(str(dirs.models / LEADERBOARD), artifact_path="training")
        mlflow.log_artifact(str(dirs.models / PLOT), artifact_path="training")
        log_nested_runs(pd.read_csv(dirs.models / LEADERBOARD))
        training = json.loads((dirs.models / SUMMARY).read_text())
        mlflow.set_tags({"training.mode": training.pop("mode"), "training.engine": training.pop("engine"),
                         "training.device": training.pop("device")})
        mlflow.log_metrics({f"training_{k}": float(v) for k, v in training.items()})
        mlflow.log_artifact(str(dirs.models / SUMMARY), artifact_path="training")
        for name in PROFILE_FILES:  # present when training ran with --profile
            if (dirs.models / name).exists():
                mlflow.log_artifact(str(dirs.models / name), artifact_path="training")
        if (dirs.quarantine / REPORT).exists():
            mlflow.log_artifact(str(dirs.quarantine / REPORT), artifact_path="validation")
        last = len(fs.timestamps) - 1
        example = policy_input(meta, fs.prices[last], fs.features[last], np.zeros(len(meta.symbols)),
                               meta.env.initial_cash)
        with warnings.catch_warnings():  # order_qty is an integer column by design
            warnings.filterwarnings("ignore", message=".*integer column", category=UserWarning)
            info = mlflow.pyfunc.log_model(
                name="policy",
                python_model=str(POLICY_MODEL_CODE),
                artifacts={"bundle": str(dirs.models)},
                input_example=example,
                pip_requirements=_requirements(),
                registered_model_name=registry.model_name,
            )
        version = str(info.registered_model_version)
        passed, reason = gate(registry, metrics)
        mlflow.set_tags({"gate": "passed" if passed else "refused", "gate_reason": reason})
    aliases = [CHALLENGER]
    client(registry).set_registered_model_alias(registry.model_name, CHALLENGER, version)
    if passed:
        promote(registry, version)
        aliases = [CHAMPION]
        log.info("version %s promoted to champion: %s", version, reason)
    else:
        log.warning("version %s stays challenger, gate refused: %s", version, reason)
    return RegisterResult(run.info.run_id, registry.model_name, version, aliases, passed, reason,
                          run.info.artifact_uri)


register_task = task(register, name="register", cache_policy=NO_CACHE)
