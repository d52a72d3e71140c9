"""The continuous loop end to end, as a user runs it (docs/operations.md), on one ``podracer up``
on free loopback ports, some of them given as overrides: each of the four servers SIGKILLed and
answering again by itself; new bars → event → CT cycle → registry, an alias moved through
MLflow's REST API → webhook → delivery at the broker, ``podracer rollback``, the receiver
killed while an alias moves, two events one cycle at a time; the runner SIGKILLed mid-cycle,
answering again and running the cycle again by itself (the new runner releases the killed
cycle's slot), resumed from its checkpoint, with no command typed; a crash loop given up on in
one line; the tracking server down for a cycle; ``podracer down`` and no process left behind; and
through it all, no process looked up a name or connected beyond loopback."""

from __future__ import annotations

import json
import os
import signal
import socket
import time

import pytest
import requests

from standins.tiny import tiny_params
from tasks.registry.aliases import CHAMPION
from tasks.registry.register import register
from tests.flows.live_services import READ, SERVICES, Project, kill_all, podracer, wait_for


def test_a_read_that_times_out_is_asked_again_and_the_deadline_names_it() -> None:
    request = requests.Request("GET", "http://127.0.0.1:9/api/health").prepare()
    answers = iter([requests.ReadTimeout("slow", request=request), requests.ConnectTimeout("slow"), "found"])

    def check() -> str:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert wait_for("an answer", check, 5, every=0.01) == "found"

    def never() -> None:
        raise requests.ReadTimeout("slow", request=request)

    with pytest.raises(AssertionError, match=r"waited 0 s for an answer; reads that timed out: \[.*GET http://127"):
        wait_for("an answer", never, 0.05, every=0.01)


@pytest.mark.slow
def test_the_loop_heals_itself_retrains_delivers_rolls_back_and_down_leaves_nothing(tmp_path, built):
    """One `podracer up` serves every step, in the order a week of operation might bring them:
    a second pair of services would cost a minute of start-up for no other behaviour."""
    p = Project(tmp_path, built)
    assert register(tiny_params(tmp_path, "registry.gate_margin=-1000")).aliases == [CHAMPION]
    pids: list[int] = []
    try:
        said = podracer(tmp_path, "up", *p.overrides)
        for name in SERVICES:
            assert f"{name} answers at http://127.0.0.1:" in said
        pids = [r["pid"] for r in p.recorded()]
        assert [r["name"] for r in p.recorded()] == SERVICES
        for flow, name in (("rlops-pipeline", "manual"), ("ct-cycle", "nightly"), ("ct-cycle", "on-new-data"),
                           ("ct-cycle", "on-decay"), ("trade", "session")):
            deployment = requests.get(f"{p.api}/deployments/name/{flow}/{name}", timeout=READ).json()
            assert deployment["enforce_parameter_schema"] is True, (flow, name)
            assert "params" in deployment["parameter_openapi_schema"]["properties"]
        nightly = requests.get(f"{p.api}/deployments/name/ct-cycle/nightly", timeout=READ).json()
        assert nightly["schedules"][0]["schedule"] == {"cron": "30 17 * * 1-5", "timezone": "America/New_York",
                                                        "day_or": True}
        mlflow_env = open(f"/proc/{pids[1]}/environ", "rb").read().split(b"\0")
        assert b"MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false" in mlflow_env  # else seven more processes
        assert oct((tmp_path / "data" / "services" / "mlflow-webhook.key").stat().st_mode & 0o777) == "0o600"
        assert podracer(tmp_path, "up", *p.overrides).count("already runs") == 5
        assert [r["pid"] for r in p.recorded()] == pids

        # each server SIGKILLed, as a crash or the OOM killer would: it answers again by itself, and
        # everything below runs on the restarted servers (the runner is SIGKILLed mid-cycle below)
        took, servers = {}, SERVICES[:-1]
        for name in servers:
            pid = p.pid(name)
            os.kill(pid, signal.SIGKILL)
            killed = time.monotonic()
            wait_for(f"{name} to answer again", lambda n=name, old=pid: p.pid(n) != old and p.answers(n), 60)
            took[name] = time.monotonic() - killed
            wait_for(f"the record of {name}", lambda n=name: next(r for r in p.recorded() if r["name"] == n)[
                "state"] == "answers", 10)  # the supervisor's next look
        print("killed -> answers again: " + ", ".join(f"{n} {t:.1f} s" for n, t in took.items()))
        rows = {r["name"]: (r["restarts"], r["reason"], r["state"]) for r in p.recorded()}
        assert rows == {**{n: (1, "killed by SIGKILL", "answers") for n in servers}, "runner": (0, "", "answers")}
        status = podracer(tmp_path, "status")  # finds them where the overrides put them
        assert status.count("answers") == 5 and "supervisor (pid" in status and "watching" in status
        pids += [r["pid"] for r in p.recorded()]

        # the runner's registry poll delivers the champion it finds undelivered (its first try may
        # have met a server killed above)
        wait_for("the champion's first delivery", lambda: p.delivered() == "1", 90)

        # new bars → podracer.data.arrived → ct-cycle/on-new-data registers version 2
        assert "event podracer.data.arrived emitted" in podracer(tmp_path, "simulate", "--bars", "5")
        tags = wait_for("the event-triggered CT cycle to register version 2",
                        lambda: p.versions().get("2", {}).get("podracer.complete") == "true" and p.versions()["2"],
                        300)
        assert tags["origin"] == "ct" and tags["eval_window"].endswith("..2022-01-07")

        # the alias moved through MLflow's REST API → webhook → event → the runner delivers → orders
        moved = time.monotonic()
        p.set_champion("2")
        wait_for("delivery with version 2", lambda: p.delivered() == "2", 90)
        assert time.monotonic() - moved < 30
        assert p.orders_of("2"), "the promotion-triggered delivery placed no order at the broker"

        # rollback goes through the registry: delivery follows
        assert podracer(tmp_path, "rollback").endswith("version 1 is champion again; version 2 is previous_champion")
        wait_for("delivery with version 1 again", lambda: p.delivered() == "1", 90)

        # the receiver killed as the alias moves: delivered all the same (the supervisor restarts the
        # receiver; the registry poll covers a webhook lost meanwhile)
        p.kill("receiver")
        p.set_champion("2")
        wait_for("the delivery of version 2", lambda: p.delivered() == "2", 60)

        # two data events in quick succession: one cycle at a time, the second queued, not lost
        before = len(p.flow_runs("ct-cycle"))
        podracer(tmp_path, "simulate", "--bars", "1")
        podracer(tmp_path, "simulate", "--bars", "1")
        runs = wait_for("two more CT cycles to finish", lambda: (
            r if len(r := p.flow_runs("ct-cycle")) >= before + 2
            and all(x["state_type"] == "COMPLETED" for x in r[before:]) else None), 300)
        first, second = runs[before], runs[before + 1]
        assert first["end_time"] <= second["start_time"], "two CT cycles overlapped"

        # the runner SIGKILLed mid-training: the supervisor restarts it, the new runner marks the run
        # Crashed and releases its slot, and its data poll starts the cycle again, which resumes from
        # its checkpoint and registers one version, with no command typed
        wait_for("no cycle under way or due", lambda: not p.cycles_due(), 60)
        known, before, marker = set(p.versions()), len(p.flow_runs("ct-cycle")), time.time()
        podracer(tmp_path, "simulate", "--bars", "1")
        checkpoints = tmp_path / "data" / "checkpoints"
        wait_for("the cycle's first checkpoint", lambda: any(  # of 2 generations: kill within the second
            c.stat().st_mtime > marker for c in checkpoints.glob("*/evolution.pt")), 300, every=0.05)
        runner = p.pid("runner")
        folders = set(checkpoints.iterdir())
        os.kill(runner, signal.SIGKILL)
        killed = time.monotonic()
        pids.append(runner)
        wait_for("the cycle to run again by itself and register", lambda: len(set(p.versions()) - known) == 1, 300)
        healed = time.monotonic() - killed
        print(f"runner SIGKILLed mid-cycle -> new version registered: {healed:.0f} s")
        assert healed <= 180, f"kill -> registration took {healed:.0f} s"
        crashed = [r for r in p.flow_runs("ct-cycle")[before:] if r["state_type"] == "CRASHED"]
        assert len(crashed) == 1
        wait_for("the rerun to complete", lambda: any(  # the version is registered a moment before the run ends
            r["state_type"] == "COMPLETED" and r["start_time"] > crashed[0]["start_time"]
            for r in p.flow_runs("ct-cycle")[before:]), 60)
        assert len(set(p.versions()) - known) == 1, "registered twice"
        assert set(checkpoints.iterdir()) == folders, "the rerun did not resume the crashed cycle's checkpoint"
        trained = p.training(*(set(p.versions()) - known))
        assert trained["training_resumed_env_steps"] > 0, trained  # resumed from the checkpoint, not trained anew
        runner_row = next(r for r in p.recorded() if r["name"] == "runner")
        assert (runner_row["restarts"], runner_row["reason"]) == (1, "killed by SIGKILL")
        wait_for("the restarted runner to answer", lambda: p.answers("runner"), 60)

        # a crash loop: the broker's port taken by another program; after 3 restarts (the SIGKILL's
        # above included: they count within 10 minutes), one line
        with socket.socket() as squatter:
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            pids.append(p.pid("broker"))
            os.kill(p.pid("broker"), signal.SIGKILL)
            deadline = time.monotonic() + 10
            while True:  # free once the supervisor has killed the rest of the group, before its restart (1 s)
                try:
                    squatter.bind(("127.0.0.1", p.ports["broker"]))
                    break
                except OSError:
                    assert time.monotonic() < deadline, "the broker's port was never free"
                    time.sleep(0.05)
            squatter.listen()
            row = wait_for("the supervisor to give up on the broker", lambda: next(
                (r for r in p.recorded() if r["name"] == "broker" and r["state"] == "gave up"), None), 180)
            assert row["reason"].startswith("gave up after 3 restarts in 600 s; last: exit code 1: ")
            assert "port" in row["reason"] and "\n" not in row["reason"]
            status = podracer(tmp_path, "status")
            assert f"✗ broker: {' '.join(row['reason'].split())}" in status
            assert row["reason"] in (tmp_path / "data" / "services" / "broker.log").read_text()

        # the tracking server down, with no supervisor to restart it: the cycle fails in one line and
        # registers nothing; `up` starts a supervisor that adopts what runs and starts MLflow, and the
        # broker given up on above (its port is free again)
        known = set(p.versions())
        before = len(p.flow_runs("ct-cycle"))
        os.kill(json.loads((tmp_path / "data" / "services" / "supervisor.json").read_text())["pid"], signal.SIGKILL)
        assert "no supervisor runs" in podracer(tmp_path, "status")
        p.kill("mlflow")
        podracer(tmp_path, "simulate", "--bars", "1")
        failed = wait_for("the cycle to fail", lambda: next(
            (r for r in p.flow_runs("ct-cycle")[before:] if r["state_type"] == "FAILED"), None), 120)
        assert "does not answer: nothing registered" in failed["state"]["message"]
        again = podracer(tmp_path, "up", *p.overrides)
        assert "mlflow answers" in again and "broker answers" in again and again.count("already runs") == 3
        assert set(p.versions()) == known
        podracer(tmp_path, "simulate", "--bars", "1")
        wait_for("the next cycle to register", lambda: len(set(p.versions()) - known) == 1, 300)

        p.down_leaves_nothing(pids)
        p.nothing_left_the_machine()
    finally:
        kill_all(tmp_path, pids)
