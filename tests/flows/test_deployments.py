"""What the deployment runner asks Prefect before its data poll announces bars again: is a
cycle under way or due, and which runs a killed runner left behind. On the tests' Prefect
server, with runs of a throwaway deployment set to each state by hand; the runner's own
delivery of a promotion event; where it adds its deployments, and the ``ct-cycle`` limit it
makes at each start."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone

from prefect import flow as make_flow
from prefect.client.orchestration import get_client
from prefect.states import Completed, Running, Scheduled

from flows.ct_cycle import LEASE_LABEL
from flows.deployments import TAG, crash_orphans, ensure_concurrency_limit, in_flight
from tests.conftest import REPO


def a_run(client, flow: str, tags: list[str]):
    """A run of a fresh deployment of the flow ``flow``."""
    flow_id = client.create_flow_from_name(flow)
    deployment = client.create_deployment(flow_id=flow_id, name=f"d-{uuid.uuid4().hex[:8]}", tags=tags)
    return client.create_flow_run_from_deployment(deployment)


def test_the_runner_adds_its_deployments_in_its_own_loop_not_in_prefects_global_one(prefect_server, monkeypatch):
    """Where adding a deployment infers its version, a blocking call into Prefect's run-sync loop:
    in the serving thread. Made from Prefect's global loop thread, as Prefect's ``serve`` makes
    it, it deadlocked with a delivery starting at the same moment (:func:`flows.deployments.serve`)."""
    from prefect.deployments.runner import RunnerDeployment
    from prefect.runner import Runner

    import flows.deployments as runner
    from flows.delivery import trade_session

    where: list[str] = []
    infer = RunnerDeployment._get_deployment_version_info

    def inferred(self, *args):
        where.append(threading.current_thread().name)
        return infer(self, *args)

    async def started(self, *args, **kwargs) -> None:  # the deployments added, the runner not started
        return None

    monkeypatch.setattr(RunnerDeployment, "_get_deployment_version_info", inferred)
    monkeypatch.setattr(Runner, "start", started)
    runner.serve([trade_session.to_deployment(name=f"t-{uuid.uuid4().hex[:8]}")])
    assert where == [threading.current_thread().name], where


def test_the_runner_creates_the_cycle_slot_once_and_sets_it_back_to_one(prefect_server, monkeypatch):
    """Each start of the runner: the ``ct-cycle`` limit is created only where it is missing (a
    refused duplicate leaves a traceback in the server's log), and set back to one slot."""
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.client.schemas.actions import GlobalConcurrencyLimitUpdate

    from flows import ct_cycle

    name, created = f"slot-{uuid.uuid4().hex[:8]}", []
    monkeypatch.setattr(ct_cycle, "CONCURRENCY", name)
    create = SyncPrefectClient.create_global_concurrency_limit
    monkeypatch.setattr(SyncPrefectClient, "create_global_concurrency_limit",
                        lambda self, limit: created.append(limit.name) or create(self, limit))
    ensure_concurrency_limit()
    ensure_concurrency_limit()  # a restarted runner
    with get_client(sync_client=True) as client:
        assert client.read_global_concurrency_limit_by_name(name).limit == 1
        client.update_global_concurrency_limit(name, GlobalConcurrencyLimitUpdate(limit=3))
        ensure_concurrency_limit()
        assert client.read_global_concurrency_limit_by_name(name).limit == 1
    assert created == [name]


def test_a_cycle_is_in_flight_while_queued_running_or_due_soon_and_a_killed_runners_runs_crash(prefect_server):
    flow = f"cycle-{uuid.uuid4().hex[:8]}"
    minute = timedelta(minutes=1)
    with get_client(sync_client=True) as client:
        run = a_run(client, flow, [TAG])
        assert in_flight(flow, minute)  # created by an event: scheduled to start now
        client.set_flow_run_state(run.id, Scheduled(scheduled_time=datetime.now(timezone.utc) + timedelta(hours=2)),
                                  force=True)
        later = client.create_flow_run_from_deployment(run.deployment_id,
                                                      state=Scheduled(scheduled_time=datetime.now(timezone.utc)
                                                                      + timedelta(hours=3)))
        assert not in_flight(flow, minute)  # only tonight's schedule: not under way
        assert in_flight(flow, timedelta(hours=4))
        client.set_flow_run_state(later.id, Completed(), force=True)
        client.set_flow_run_state(run.id, Running(), force=True)
        assert in_flight(flow, minute)
        other = a_run(client, f"other-{uuid.uuid4().hex[:8]}", ["someone-else"])
        client.set_flow_run_state(other.id, Running(), force=True)
        delivery = client.create_flow_run(make_flow(name=f"deliver-{uuid.uuid4().hex[:8]}")(lambda: None), tags=[TAG],
                                          state=Running())  # the runner's own delivery, in its process
        shell = client.create_flow_run(make_flow(name=f"run-{uuid.uuid4().hex[:8]}")(lambda: None), state=Running())

        assert {run.name, delivery.name} <= set(crash_orphans())  # the runner starts: none of its own can run
        assert client.read_flow_run(run.id).state.type.value == "CRASHED"
        assert client.read_flow_run(delivery.id).state.type.value == "CRASHED"
        assert client.read_flow_run(other.id).state.type.value == "RUNNING"  # not the project's
        assert client.read_flow_run(shell.id).state.type.value == "RUNNING"  # `podracer run` in a shell
        assert not in_flight(flow, minute)
        assert run.name not in crash_orphans()


HOLDER = """
import sys, time
from prefect import flow, tags
from flows import ct_cycle

ct_cycle.CONCURRENCY = sys.argv[1]

@flow(name=sys.argv[2])
def cycle():
    with ct_cycle._hold_slot():
        time.sleep(600)

with tags(sys.argv[3]):
    cycle()
"""
"""A CT cycle's hold on its slot, in a process of its own, to be killed as its runner would be."""


def test_a_new_runner_releases_the_slot_a_killed_cycle_held_so_its_rerun_starts_at_once(prefect_server):
    """The next runner releases a killed cycle's slot through the lease the run named, instead
    of leaving the rerun to wait until the lease runs out (docs/operations.md, The supervisor)."""
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName
    from prefect.concurrency.sync import concurrency
    from prefect.settings import PREFECT_API_URL

    limit, flow = f"slot-{uuid.uuid4().hex[:8]}", f"cycle-{uuid.uuid4().hex[:8]}"
    with get_client(sync_client=True) as client:
        client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=limit, limit=1))
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, limit, flow, TAG], start_new_session=True,
                                  env={**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(),
                                       "PYTHONPATH": str(REPO)})
        try:
            deadline = time.monotonic() + 120
            while not (runs := [r for r in client.read_flow_runs(
                    flow_filter=FlowFilter(name=FlowFilterName(any_=[flow]))) if LEASE_LABEL in r.labels]):
                assert holder.poll() is None and time.monotonic() < deadline, "the cycle never named its lease"
                time.sleep(0.2)
        finally:
            os.killpg(holder.pid, signal.SIGKILL)
            holder.wait()
        assert client.read_global_concurrency_limit_by_name(limit).active_slots == 1
        assert runs[0].name in crash_orphans()
        assert client.read_global_concurrency_limit_by_name(limit).active_slots == 0
    with concurrency(limit, occupy=1, timeout_seconds=5, lease_duration=60):  # not after the lease's 60 s
        pass


def test_the_runner_delivers_a_promotion_in_its_own_process_the_moment_the_event_arrives(prefect_server, tmp_path,
                                                                                      monkeypatch):
    """``podracer.model.promoted`` for this model starts a delivery here, within seconds (no
    deployment run to poll for, no process to start); another model's event does not, and a
    burst of moves is delivered once (docs/operations.md, Delivery on promotion)."""
    import flows.delivery
    from flows.deployments import listen_promotions
    from standins.tiny import tiny_params
    from tasks.registry.webhook import prefect_emit, promotion_event

    params = tiny_params(tmp_path, f"registry.model_name=m-{uuid.uuid4().hex[:8]}")
    delivered: queue.Queue = queue.Queue()
    busy = threading.Event()

    def deliver(p, version):
        delivered.put((p.registry.model_name, version))
        busy.wait(10)  # the first delivery takes a while: later moves queue up

    monkeypatch.setattr(flows.delivery, "deliver_champion", deliver)
    stop = threading.Event()
    listen_promotions(params, stop)
    time.sleep(2)  # subscribed
    prefect_emit(promotion_event("someone-else", "9", "d0", "webhook"))
    sent = time.monotonic()
    prefect_emit(promotion_event(params.registry.model_name, "3", "d1", "webhook"))
    assert delivered.get(timeout=20) == (params.registry.model_name, "3")
    assert time.monotonic() - sent < 5
    for version in ("4", "5"):
        prefect_emit(promotion_event(params.registry.model_name, version, f"d{version}", "poll"))
    time.sleep(2)
    busy.set()
    assert delivered.get(timeout=20) == (params.registry.model_name, "5")  # the burst folded into one delivery
    time.sleep(1)
    assert delivered.empty()
    prefect_emit(promotion_event("someone-else", "9", "d9", "webhook"))  # now surely subscribed: not ours
    time.sleep(1)
    prefect_emit(promotion_event(params.registry.model_name, "6", "d6", "webhook"))
    assert delivered.get(timeout=20) == (params.registry.model_name, "6")
    stop.set()


RUNNER = """
import signal, sys, threading, time
import flows.deployments as runner

def serve(*deployments, **options):
    # What a CT cycle leaves in the runner: a worker thread, not a daemon, that its event loop
    # stops only if the loop's cleanup finishes (AnyIO's, after waiting for the flow process).
    threading.Thread(target=threading.Event().wait, name="AnyIO worker thread").start()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # Prefect's Runner.handle_sigterm
    print("serving", flush=True)
    time.sleep(120)

runner.serve = serve
runner.ensure_concurrency_limit = runner.crash_orphans = lambda: None
runner.listen_promotions = runner.start_polls = lambda params, stop: []
runner.deployments = lambda params: []
sys.argv = ["runner", "-p", "params.yaml"]
runner.main()
"""
"""The runner's ``main`` with its ``serve`` replaced by one that leaves what a finished CT cycle
leaves behind, and the server calls stubbed: no Prefect server needed."""


def test_the_runner_ends_at_sigterm_even_with_the_threads_a_finished_cycle_leaves():
    """``podracer down`` after a CT cycle is as fast as idle: the runner exits on SIGTERM, even
    though serving left a worker thread that is not a daemon (which kept the interpreter
    waiting out ``down``'s whole grace, about 18 s)."""
    served = subprocess.Popen([sys.executable, "-c", RUNNER], cwd=REPO, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True)
    try:
        assert served.stdout.readline().strip() == "serving"
        os.killpg(served.pid, signal.SIGTERM)
        code = served.wait(timeout=10)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        if served.poll() is None:
            os.killpg(served.pid, signal.SIGKILL)
        served.wait()
        served.stdout.close()
    assert code == 0, "the runner did not end within 10 s of SIGTERM"
