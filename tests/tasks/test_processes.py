"""How a service's process and its group are judged alive (tasks/processes.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tasks.processes import alive, group_alive


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
