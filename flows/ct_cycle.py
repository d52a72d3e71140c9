"""The Prefect flow ``ct_cycle``: one continuous-training cycle (issue 13, §3; DESIGN §1).

Wiring only; the steps are :mod:`tasks.registry.ct`. New bars → validation → features →
a population warm-started from the champion → challenger, champion and buy-and-hold on the
same evaluation window → the gate → registration with the gate report (a Prefect artifact,
and MLflow artifacts beside the version). Promotion moves the ``champion`` alias, and the
``deliver/on-promotion`` deployment delivers it (:mod:`flows.deployments`).

At most one cycle runs at a time: both ct-cycle deployments share the global concurrency
limit ``ct-cycle`` (one slot), so a second data event queues its run instead of losing it.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE
from prefect.concurrency.sync import concurrency

from tasks.config import Params, load_params
from tasks.data.validate import validate_task
from tasks.model.walkforward import windows
from tasks.registry import ct
from tasks.registry.register import RegisterResult, register

CONCURRENCY = "ct-cycle"


@dataclass(frozen=True)
class CycleSummary:
    data_version: str
    note: str
    """One line: why the cycle ended early, or what the gate decided."""
    registered: RegisterResult | None = None
    appended_bars: int = 0
    training: str = ""
    """How the challenger trained: warm or cold, and what it cost (resumed steps included)."""


new_data_task = task(ct.new_data, name="ingest new bars", cache_policy=NO_CACHE)
features_task = task(ct.with_features, name="features (appended)", cache_policy=NO_CACHE)
champion_task = task(ct.current_champion, name="fetch champion", cache_policy=NO_CACHE, retries=2,
                     retry_delay_seconds=5)
train_task = task(ct.train_challenger, name="train challenger", cache_policy=NO_CACHE, retries=2,
                  retry_delay_seconds=5)  # a retry resumes from the checkpoint
compare_task = task(ct.compare, name="backtest on the window", cache_policy=NO_CACHE)
report_task = task(ct.gate_report, name="gate report", cache_policy=NO_CACHE)
refit_task = task(ct.refit, name="refit", cache_policy=NO_CACHE)
register_task = task(register, name="register", cache_policy=NO_CACHE)


def _hold_slot() -> contextlib.AbstractContextManager:
    """The ``ct-cycle`` global concurrency slot when a Prefect server is configured (the
    temporary server of ``podracer ct`` has no such limit, and needs none)."""
    if not os.environ.get("PREFECT_API_URL"):
        return contextlib.nullcontext()
    return concurrency(CONCURRENCY, occupy=1, timeout_seconds=3600)


@flow(name="ct-cycle")
def ct_cycle(params: Params | None = None, data_version: str | None = None) -> CycleSummary:
    """Retrain on new bars and challenge the champion on the newest window.

    ``data_version`` is the version a ``podracer.data.arrived`` event announced; the cycle
    works on what ``data/raw/`` holds when it starts (a later arrival is its own cycle).
    """
    params = params or load_params()
    with _hold_slot():
        ct.check_tracking(params)
        champion = champion_task(params)
        found = new_data_task(params, champion.data_version if champion else None)
        if found.nothing_new:
            return CycleSummary(found.data_version, found.nothing_new)
        validate_task(params)
        fs, appended = features_task(params)
        w = windows(fs, params.ct.eval_bars)
        trained, how = train_task(params, found.data_version, fs, w, champion)
        cmp = compare_task(params, fs, w, trained.model_dir, champion)
        passed, reason, markdown, sheet = report_task(params, w, cmp)
        create_markdown_artifact(markdown=markdown, key="gate-report",
                                 description=f"Challenger vs champion vs buy-and-hold, {w.first} to {w.last}")
        model_dir, refitted = trained.model_dir, False
        if passed and params.ct.refit:
            model_dir, refitted = refit_task(params, found.data_version, fs, w, trained.model_dir), True
        ct.check_tracking(params)
        registered = register_task(params, ct.candidate(params, found.data_version, w, cmp, model_dir, passed,
                                                        reason, markdown, sheet, how, refitted))
        ct.record_processed(params, found.data_version, {"version": registered.version, "promoted": passed})
        verdict = "promoted to champion" if passed else "stays challenger"
        return CycleSummary(found.data_version, f"version {registered.version} {verdict}: {reason}", registered,
                            appended, f"{how}; {trained.describe()}")
