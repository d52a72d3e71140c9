"""The Prefect flow ``ct_cycle``: one continuous-training cycle (docs/operations.md, the CT cycle).

Wiring only: the same stage tasks as :mod:`flows.pipeline`, on the cycle's walk forward
(:func:`tasks.model.walkforward.walk`: its windows, the challenger's training plan and the
window bars the champion has seen, worked out once) and against the champion. New bars →
validation → features → a population warm-started from the champion → challenger, champion
and buy-and-hold on the same evaluation window, and the standing shadow's record → the
gate, whose look at the shadow is written on its version at once (a cycle that fails later
does not look again) → registration with the gate report (a Prefect artifact, and MLflow
artifacts beside the version). The challenger can only enter shadow; a shadow whose record
passes the test is promoted, which moves the ``champion`` alias, and the runner delivers it
(:func:`flows.deployments.listen_promotions`).

At most one cycle runs at a time: both ct-cycle deployments share the global concurrency
limit ``ct-cycle`` (one slot), so a second data event queues its run instead of losing it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass

from prefect import flow
from prefect.artifacts import create_markdown_artifact
from prefect.concurrency.sync import concurrency

from flows.stages import (
    backtest_task,
    champion_task,
    features_task,
    gate_task,
    ingest_task,
    look_task,
    record_task,
    register_task,
    shadow_task,
    train_task,
    validate_task,
)
from flows.terminal import training_bar
from tasks.config import Params, load_params
from tasks.model.ct_record import nothing_new, record_processed
from tasks.model.walkforward import walk
from tasks.registry.register import RegisterResult, cycle_candidate
from tasks.registry.store import check_tracking

CONCURRENCY = "ct-cycle"
LEASE_SECONDS = 60.0
"""The ``ct-cycle`` slot's lease, renewed every 45 s while the cycle runs. A cycle killed
with its runner has its lease released by the next runner (:data:`LEASE_LABEL`); one killed
before it could name its lease frees the slot when the lease runs out, 60-75 s later (the
server looks for expired leases every 15 s), not after Prefect's default 300 s
(docs/operations.md, The supervisor)."""
LEASE_LABEL = "podracer.slot-lease"
"""The flow-run label that names the lease of the ``ct-cycle`` slot the run holds: Prefect's
API lists no leases, so a new runner reads it here to release the slot of a run it marks
Crashed (:func:`flows.deployments.crash_orphans`)."""
RETRIED = {"retries": 2, "retry_delay_seconds": 5}
"""A failed fetch of the champion, or a failed training, is tried again: training resumes
from its checkpoint (:func:`tasks.model.walkforward.challenger_plan`)."""


@dataclass(frozen=True)
class CycleSummary:
    data_version: str
    note: str
    """One line: why the cycle ended early, or what the gate decided."""
    registered: RegisterResult | None = None
    appended_bars: int = 0
    training: str = ""
    """How the challenger trained: warm or cold, and what it cost (resumed steps included)."""


@contextlib.contextmanager
def _hold_slot() -> Iterator[None]:
    """The ``ct-cycle`` global concurrency slot when a Prefect server is configured (the
    temporary server of ``podracer ct`` has no such limit, and needs none), its lease named
    on the flow run."""
    if not os.environ.get("PREFECT_API_URL"):
        yield
        return
    with concurrency(CONCURRENCY, occupy=1, timeout_seconds=3600, lease_duration=LEASE_SECONDS):
        _name_lease()
        yield


def _name_lease() -> None:
    """Label this flow run with the slot's lease (:data:`LEASE_LABEL`). Prefect records a
    lease it grants inside a run in the run's ``ConcurrencyContext``, to release it should the
    release be cancelled; outside a flow run there is nothing to label."""
    from prefect.client.orchestration import get_client
    from prefect.concurrency.context import ConcurrencyContext
    from prefect.runtime import flow_run

    held = ConcurrencyContext.get()
    if held is None or not held.cleanup_lease_ids or not flow_run.id:
        return
    with get_client(sync_client=True) as client:
        client.update_flow_run_labels(flow_run.id, {LEASE_LABEL: str(held.cleanup_lease_ids[-1])})


@flow(name="ct-cycle")
def ct_cycle(params: Params | None = None, data_version: str | None = None,
             decayed: str | None = None) -> CycleSummary:
    """Retrain on new bars and challenge the champion on the newest window.

    ``data_version`` is the version a ``podracer.data.arrived`` event announced; the cycle
    works on what ``data/raw/`` holds when it starts (a later arrival is its own cycle).
    ``decayed`` is the watch's line of a champion found decaying (``podracer.champion.decayed``,
    docs/operations.md, the watch): the cycle then runs on the data it has, new bars or not.
    """
    params = params or load_params()
    with _hold_slot():
        check_tracking(params.registry)
        champion = champion_task.with_options(**RETRIED)(params)
        ingested = ingest_task(params, latest=True)
        why = None if decayed else nothing_new(params, ingested, champion.data_version if champion else None)
        if why:
            return CycleSummary(ingested.data_version, why)
        validate_task(params)
        featured = features_task(params)
        walked = walk(params, champion)
        version = ingested.data_version
        trained = train_task.with_options(**RETRIED)(params, version, walked.plan, display=training_bar)
        tested = backtest_task(params, walked)
        shadow = shadow_task(params)
        record = record_task(params, shadow, champion) if shadow else None
        verdict = gate_task(params, tested, shadow, record)
        if verdict.decision.shadow is not None:  # the look is written before anything acts on it
            look_task(params.registry, verdict.decision.shadow)
        w = walked.windows
        create_markdown_artifact(markdown=verdict.report_markdown, key="gate-report",
                                 description=f"Challenger vs champion vs buy-and-hold, {w.first} to {w.last}")
        check_tracking(params.registry)
        registered = register_task(params, cycle_candidate(version, trained, tested, verdict))
        record_processed(params, version, {"version": registered.version, "champion": registered.champion_now})
        return CycleSummary(version, f"version {registered.version}: {verdict.reason}", registered,
                            featured.appended, trained.describe())
