"""What the deployment runner asks Prefect before its data poll announces bars again: is a
cycle under way or due, and which runs a killed runner left behind. On the tests' Prefect
server, with runs of a throwaway deployment set to each state by hand."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

from prefect.client.orchestration import get_client
from prefect.states import Completed, Running, Scheduled

from flows.deployments import TAG, crash_orphans, in_flight


def a_run(client, flow: str, tags: list[str]):
    """A run of a fresh deployment of the flow ``flow``."""
    flow_id = client.create_flow_from_name(flow)
    deployment = client.create_deployment(flow_id=flow_id, name=f"d-{uuid.uuid4().hex[:8]}", tags=tags)
    return client.create_flow_run_from_deployment(deployment)


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

        assert run.name in crash_orphans()  # the runner starts: nothing of its own can be running
        assert client.read_flow_run(run.id).state.type.value == "CRASHED"
        assert client.read_flow_run(other.id).state.type.value == "RUNNING"  # not the project's
        assert not in_flight(flow, minute)
        assert run.name not in crash_orphans()
