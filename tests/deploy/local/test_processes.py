"""How a service's process and its group are judged alive (deploy/local/processes.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from deploy.local.processes import alive, group_alive, stop


def test_a_group_lives_while_any_member_runs_and_its_zombies_do_not_count():
    """`down` and the tests ask this after a kill: a service's children outlive its leader,
    and a killed process stays a zombie until its parent reaps it."""
    leader = subprocess.Popen([sys.executable, "-c", "import subprocess, time; subprocess.Popen(['sleep', '60']); "
                               "time.sleep(60)"], start_new_session=True)
    try:
        time.sleep(0.5)  # its child started
        os.kill(leader.pid, signal.SIGKILL)  # a zombie now: this process has not reaped it
        time.sleep(0.2)
        assert group_alive(leader.pid)  # its child (`sleep`) still runs
        os.killpg(leader.pid, signal.SIGKILL)
        time.sleep(0.2)
        assert not group_alive(leader.pid)  # the leader is an unreaped zombie, its child too or gone
        assert not alive(leader.pid)
    finally:
        leader.wait()


def test_a_stop_reaches_the_whole_group_so_no_child_of_a_service_outlives_it():
    """`down` and the supervisor stop a service by its process group, not its leader alone: a
    runner's flow processes, or MLflow's workers, go with it instead of living on as orphans
    that hold a port or a cycle (docs/operations.md, The supervisor)."""
    spawn = "import subprocess, time; child = subprocess.Popen(['sleep', '60']); print(child.pid, flush=True); " \
        "time.sleep(60)"
    leader = subprocess.Popen([sys.executable, "-c", spawn],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    child = int(leader.stdout.readline())
    try:
        assert alive(child)
        stop(leader.pid, grace=5.0)
        assert not alive(leader.pid)
        deadline = time.monotonic() + 5
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(child), "the service's child outlived the stop"
        assert not group_alive(leader.pid)
    finally:
        for pid in (leader.pid, child):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        leader.wait()
        leader.stdout.close()
