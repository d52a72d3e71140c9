"""How the supervisor of ``podracer up`` judges a process alive and stops it (docs/operations.md).

Each service leads a session of its own, so its PID is also its process group: stopping the
group stops what the service started too (MLflow's workers, the runner's flow processes). A
killed process stays a zombie until its parent reaps it; the services outlive ``podracer up``
and are reparented to init, which reaps every couple of seconds, so a zombie never counts
as running here.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

GRACE_SECONDS = 15.0
"""Seconds between SIGTERM and SIGKILL when ``podracer down`` stops a service."""
DUMP_WAIT = 3.0
"""Seconds a service that stopped answering has to write its threads' stacks and end, after SIGABRT."""


def alive(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie does not count, whether it is a child of this process
    (reaped here) or an orphan that init has not reaped yet (read from ``/proc`` on Linux)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc: signal 0 reached it


def group_alive(group: int) -> bool:
    """Whether a process of the process group ``group`` runs (zombies do not count: init may
    take a while to reap what a killed service left behind)."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return False
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            return True
    return False


def signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # each service leads its own session: its children go too
    except ProcessLookupError:
        pass


def dump_stacks(pid: int, wait: float = DUMP_WAIT) -> None:
    """SIGABRT to ``pid``, a service that stopped answering: the fault handler it runs with
    (``PYTHONFAULTHANDLER``, set by :meth:`deploy.local.supervisor.Supervisor.spawn`) writes
    each of its threads' stacks to its log, then it ends. Returns once it has ended, or after
    ``wait`` seconds (a process that handles SIGABRT otherwise is then stopped as any other)."""
    try:
        os.kill(pid, signal.SIGABRT)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + wait
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def stop(pid: int, twice: bool = False, grace: float = GRACE_SECONDS) -> None:
    """Stop the process group ``pid`` leads: SIGTERM (``twice`` for Prefect's ``serve``), then
    SIGKILL after ``grace`` seconds; returns once the leader is gone."""
    signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
        if twice:
            signal_group(pid, signal.SIGTERM)
            twice = False
    signal_group(pid, signal.SIGKILL)  # the leader, or children it left behind
    while alive(pid):
        time.sleep(0.05)
