"""The project's Prefect deployments, served by one runner (``podracer up`` starts it).

Wiring only. Each deployment's parameter is the typed config (``Params``), so the Prefect UI
shows it as an editable form with its field descriptions, and the schema is enforced: a
bad value is refused (HTTP 409) before any run starts (docs/operations.md).

| deployment | runs | started by |
|---|---|---|
| ``rlops-pipeline/manual`` | the whole pipeline | the UI or ``prefect deployment run`` |
| ``ct-cycle/nightly`` | the CT cycle | cron ``schedule.retrain_cron`` in ``schedule.timezone`` |
| ``ct-cycle/on-new-data`` | the CT cycle | the event ``podracer.data.arrived`` (new bars landed) |
| ``ct-cycle/on-decay`` | the CT cycle, new bars or not | the event ``podracer.champion.decayed`` (the live watch) |
| ``trade/session`` | one trading cycle | cron ``schedule.trade_cron`` (market days) |

A new champion is delivered by the runner itself (:func:`listen_promotions`): it subscribes to
Prefect's event stream and runs the ``deliver`` flow in its own, warm process the moment
``podracer.model.promoted`` arrives, instead of waiting for a deployment run to be polled and
a fresh process to import torch, MLflow and alpaca-py (5-7 s on 2 cores; docs/benchmarks.md,
the continuous-training loop). Events that arrive while a delivery runs are folded into one
delivery of the current champion.

The runner also polls every ``services.poll_seconds`` (:class:`tasks.registry.webhook.Poller`):

- the registry: a champion that no delivery has traded with for that long (a lost webhook)
  is announced again (``podracer.model.promoted``);
- the data: bars in ``data/raw/`` that no CT cycle has finished on (``data/ct/state.json``),
  with no cycle queued or running, are announced again (``podracer.data.arrived``). So a
  cycle that crashed (its runner killed) or failed runs again by itself, and its training
  resumes from its checkpoint; a cycle that keeps failing is retried ever less often.

When it starts, the runner marks ``Crashed`` the runs that a runner killed with its flow
processes left ``Running`` (they would hold their deployment's concurrency slot, and the data
poll would wait on them for ever), and releases the ``ct-cycle`` slot such a run held through
the lease named on it, so the data poll's rerun takes the slot at once.

    python -m flows.deployments -p params.yaml   # with PREFECT_API_URL set to the server

Prefect reads its settings when it is imported, so :func:`main` loads ``.env`` first and
everything that imports Prefect is imported inside the functions here.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import queue
import sys
import threading
import traceback
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn
from uuid import UUID

from tasks.config import Params, load_params
from tasks.settings import load_env_defaults

if TYPE_CHECKING:
    from prefect.deployments.runner import RunnerDeployment

log = logging.getLogger("podracer.runner")
TAG = "podracer"
"""Every deployment's tag, which its runs carry too."""
ACTIVE = ("PENDING", "RUNNING", "PAUSED", "CANCELLING")
"""Prefect's state types of a run under way."""


def deployments(params: Params) -> list[RunnerDeployment]:
    """Every deployment of the project, its default parameters from ``params``."""
    from prefect.events import DeploymentEventTrigger
    from prefect.schedules import Cron

    from flows.ct_cycle import ct_cycle
    from flows.delivery import trade_session
    from flows.pipeline import rlops_pipeline
    from tasks.data.arrivals import ARRIVED
    from tasks.delivery.client.watch import DECAYED

    config = {"params": params.model_dump(mode="json")}
    common = {"enforce_parameter_schema": True, "tags": [TAG]}
    tz, schedule = params.schedule.timezone, params.schedule
    return [
        rlops_pipeline.to_deployment(
            name="manual", parameters=config, **common,
            description="The whole pipeline, ingest to delivery, started from the UI or `prefect deployment run`."),
        ct_cycle.to_deployment(
            name="nightly", parameters=config, schedule=Cron(schedule.retrain_cron, timezone=tz),
            concurrency_limit=1, **common,
            description=f"The continuous-training cycle at `{schedule.retrain_cron}` ({tz}): new bars, warm "
                        "retraining, the champion-vs-challenger gate, registration."),
        ct_cycle.to_deployment(
            name="on-new-data", parameters=config, concurrency_limit=1, **common,
            triggers=[DeploymentEventTrigger(
                name="new bars", expect={ARRIVED}, match={"prefect.resource.id": "podracer.dataset.*"},
                parameters={"data_version": "{{ event.payload.data_version }}"})],
            description=f"The continuous-training cycle, started by a `{ARRIVED}` event (new bars, or bars no "
                        "cycle has finished on, announced again by the runner's data poll)."),
        ct_cycle.to_deployment(
            name="on-decay", parameters=config, concurrency_limit=1, **common,
            triggers=[DeploymentEventTrigger(
                name="champion decayed", expect={DECAYED}, match={"prefect.resource.id": "podracer.model.*"},
                parameters={"decayed": "{{ event.payload.line }}"})],
            description=f"The continuous-training cycle at once, new bars or not, when the champion's live watch "
                        f"finds decay (`{DECAYED}`; docs/operations.md, the watch)."),
        trade_session.to_deployment(
            name="session", parameters=config, schedule=Cron(schedule.trade_cron, timezone=tz), **common,
            description=f"One trading cycle of the champion at `{schedule.trade_cron}` ({tz})."),
    ]


def ensure_concurrency_limit() -> None:
    """The ``ct-cycle`` global concurrency limit (one slot) that both CT deployments share:
    created if missing, set back to one slot if it was changed. It is read first: a create
    that the server refuses as a duplicate leaves an ``IntegrityError`` traceback in its log,
    which every restart of the runner would add."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectAlreadyExists

    from flows.ct_cycle import CONCURRENCY

    with get_client(sync_client=True) as client:
        try:
            client.upsert_global_concurrency_limit_by_name(CONCURRENCY, 1)
        except ObjectAlreadyExists:  # created by another process between the read and the create
            pass


def in_flight(flow_name: str, within: timedelta) -> bool:
    """Is a run of the flow ``flow_name`` under way, or due to start within ``within``
    (queued by an event, waiting for its concurrency slot, late, or a schedule's next run)?"""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowFilter,
        FlowFilterName,
        FlowRunFilter,
        FlowRunFilterNextScheduledStartTime,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType

    def kinds(*names: str) -> FlowRunFilterState:
        return FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType(name) for name in names]))

    soon = datetime.now(timezone.utc) + within
    flows = FlowFilter(name=FlowFilterName(any_=[flow_name]))
    with get_client(sync_client=True) as client:
        return any(client.read_flow_runs(flow_filter=flows, flow_run_filter=runs, limit=1) for runs in (
            FlowRunFilter(state=kinds(*ACTIVE)),
            FlowRunFilter(state=kinds("SCHEDULED"),
                          next_scheduled_start_time=FlowRunFilterNextScheduledStartTime(before_=soon))))


def crash_orphans() -> list[str]:
    """Mark ``Crashed`` every run under way that carries the project's tag (its deployments'
    runs and the runner's own deliveries): called when the runner starts, when none of them
    can be, since they execute in the runner's own processes. A run's deployment slot is freed
    with its Crashed state, and the ``ct-cycle`` slot its flow held is released through the
    lease named on the run (:data:`flows.ct_cycle.LEASE_LABEL`), so the rerun need not wait for
    the lease to run out. Returns the names of the runs it marked."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
        FlowRunFilterTags,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.states import Crashed

    from flows.ct_cycle import LEASE_LABEL

    marked = []
    with get_client(sync_client=True) as client:
        orphans = client.read_flow_runs(flow_run_filter=FlowRunFilter(
            state=FlowRunFilterState(type=FlowRunFilterStateType(any_=[StateType(k) for k in ACTIVE])),
            tags=FlowRunFilterTags(all_=[TAG])))
        for run in orphans:
            client.set_flow_run_state(run.id, Crashed(message="its runner was killed; a new runner started"),
                                      force=True)
            log.warning("flow run %s (%s) was left %s by a killed runner: marked Crashed", run.name, run.id,
                        run.state_name)
            if lease := run.labels.get(LEASE_LABEL):
                client.release_concurrency_slots_with_lease(UUID(str(lease)))
                log.warning("flow run %s: its ct-cycle slot released", run.name)
            marked.append(run.name)
    return marked


def listen_promotions(params: Params, stop: threading.Event) -> list[threading.Thread]:
    """Deliver the champion in this process when ``podracer.model.promoted`` arrives: one
    daemon thread follows Prefect's event stream (reconnecting while the server restarts),
    another runs the ``deliver`` flow, one delivery at a time, tagged like the deployments'
    runs (so that :func:`crash_orphans` finds it if the runner is killed)."""
    wanted: queue.Queue[str | None] = queue.Queue()

    def follow() -> None:
        from prefect.events.clients import get_events_subscriber
        from prefect.events.filters import EventFilter, EventNameFilter, EventResourceFilter

        from tasks.registry.webhook import PROMOTED

        only = EventFilter(event=EventNameFilter(name=[PROMOTED]),
                           resource=EventResourceFilter(id=[f"podracer.model.{params.registry.model_name}"]))

        async def listen() -> None:
            while not stop.is_set():
                try:
                    async with get_events_subscriber(filter=only.model_copy(deep=True)) as events:
                        async for event in events:
                            wanted.put(event.payload.get("version"))
                except Exception as err:  # noqa: BLE001 - the server is away: listen again
                    log.warning("event stream lost (%s): listening again in 2 s", err)
                    await asyncio.sleep(2)

        asyncio.run(listen())

    def deliver() -> None:
        from prefect import tags

        from flows.delivery import deliver_champion

        while not stop.is_set():
            version = wanted.get()
            while not wanted.empty():  # a burst of moves: the current champion once
                version = wanted.get_nowait()
            try:
                with tags(TAG):
                    deliver_champion(params, version)
            except Exception:  # noqa: BLE001 - the run is Failed in Prefect; the next event tries again
                log.exception("delivery of version %s failed", version)

    threads = [threading.Thread(target=target, name=name, daemon=True)
               for target, name in ((follow, "promotions"), (deliver, "deliver"))]
    for thread in threads:
        thread.start()
    return threads


def start_polls(params: Params, stop: threading.Event) -> list[threading.Thread]:
    """The registry poll (lost webhooks) and the data poll (crashed, failed or unannounced
    CT cycles), each in a daemon thread of the runner."""
    from flows.ct_cycle import ct_cycle
    from tasks.caching import current_version
    from tasks.data.arrivals import polled_arrival, unprocessed
    from tasks.delivery.client.deliver import delivered_version
    from tasks.model.ct_record import last_processed
    from tasks.registry.aliases import champion_data_version, champion_version
    from tasks.registry.webhook import Poller, polled_promotion, prefect_emit, undelivered

    registry, every = params.registry, params.services.poll_seconds
    polls = [
        Poller(f"{registry.model_name}@champion",
               lambda: undelivered(champion_version(registry), delivered_version(params)),
               partial(polled_promotion, registry.model_name), prefect_emit, every),
        Poller(f"{params.dirs.raw}",
               lambda: unprocessed(current_version(params), last_processed(params) or champion_data_version(registry)),
               partial(polled_arrival, params), prefect_emit, every,
               busy=lambda: in_flight(ct_cycle.name, timedelta(seconds=every))),
    ]
    threads = [threading.Thread(target=poll.run, args=(stop,), name=f"poll {poll.what}", daemon=True)
               for poll in polls]
    for thread in threads:
        thread.start()
    return threads


def main() -> None:
    load_env_defaults()  # before Prefect is imported: it reads PREFECT_* settings then
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-p", "--params", type=Path, default=Path("params.yaml"))
    args = parser.parse_args()
    params = load_params(args.params)
    ensure_concurrency_limit()
    crash_orphans()
    stop = threading.Event()
    listen_promotions(params, stop)
    start_polls(params, stop)
    leave(lambda: serve(deployments(params)))


def serve(served: list[RunnerDeployment]) -> None:
    """Prefect's ``serve``, but with the deployments added in this thread's own event loop
    (Prefect's ``aserve``), not in Prefect's global loop thread.

    Adding a deployment infers its version with a blocking call into Prefect's run-sync loop.
    ``serve`` makes that call from the global loop thread, and a delivery started by
    :func:`listen_promotions` at the same moment can hold the run-sync loop waiting on the
    global loop (the task's concurrency slots start a service there): each loop then waits on
    the other for ever. A runner restarted with a delivery due hung so for 4 minutes until the
    supervisor restarted it again (py-spy's stacks of the hung runner; docs/operations.md).
    Here the blocking call holds only this thread's loop, which nothing else waits on."""
    from prefect import aserve
    from prefect.exceptions import TerminationSignal

    try:
        asyncio.run(aserve(*served, print_starting_message=True))
    except (KeyboardInterrupt, TerminationSignal) as err:  # as Prefect's serve ends on them
        log.info("received %s, shutting down", type(err).__name__)


def leave(serving: Callable[[], object]) -> NoReturn:
    """Run ``serving`` (:func:`serve`), then end this process at once, whatever threads
    it left running.

    On SIGTERM Prefect's runner raises ``SystemExit`` from its signal handler; the second
    SIGTERM of ``podracer down`` (docs/operations.md) raises it again while ``asyncio.run`` is
    still cleaning up, waiting for a flow-run process (after a CT cycle, its ``prefect.engine``
    child) to end. The loop is then closed before it tells its AnyIO worker threads, which are
    not daemons, to stop, and the interpreter waits on them for ever: ``down`` waited its whole
    grace for the runner after every cycle (about 18 s, against 3-5 s idle). What the runner
    must finish (deployments paused, flow processes signalled) is done when ``serve`` returns
    or raises; what it leaves is only threads, and the flow processes of its group that
    ``down`` kills with it."""
    code = 1
    try:
        serving()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    except BaseException:  # noqa: BLE001 - printed, then the exit code says it failed
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


if __name__ == "__main__":
    main()
