"""The supervisor ``podracer up`` leaves behind: it starts the services of the plan, each as
soon as what it goes through answers, and keeps them alive (docs/operations.md, The supervisor).

It is the parent of every service it starts, so it knows how each one ended: an exit code,
or the signal that killed it. Every ``tick`` it checks that each process runs, and every few
seconds that each answers the one health check (:func:`tasks.health.answers`). A service that

- exits, or is killed, is restarted;
- runs but has not answered for ``services.health_grace`` seconds (``start_timeout`` after a
  start) is sent SIGABRT first: every service runs with Python's fault handler on
  (``PYTHONFAULTHANDLER``), which then writes each of its threads' stacks to its log, so the
  log shows where it hung. It is then stopped (SIGTERM, SIGKILL after 10 s) and restarted. A
  service whose health check goes through another one (the runner's poll goes through Prefect)
  is not judged while that one does not answer.

Before a restart, what is left of the service's process group is killed (a runner's flow
processes, say), so that nothing of the old one holds a port or a cycle. The k-th restart
within ``services.restart_window`` waits ``restart_backoff`` × 2^(k−1) seconds (at most 60).
A service that dies again after ``restart_limit`` restarts within the window is a crash loop:
the supervisor stops retrying it and says why in one line, in ``services.json`` (so ``podracer
status`` shows it), in its own log and in the service's log. The next ``podracer up`` (which
sends SIGUSR1) tries it again with a fresh count.

Every restart uses the same command and environment as the first start: the plan ``up`` wrote
(``data/services/plan.json``), whose project services load ``data/services/params.yaml``.
SIGTERM (``podracer down``) ends the supervisor and leaves the services to ``down``.

    python -m deploy.local.supervisor data/services    # what `podracer up` runs
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from deploy.local.processes import alive, dump_stacks, signal_group, stop
from deploy.local.services import (
    PLAN,
    STOPPED_TWICE,
    SUPERVISOR,
    Running,
    Service,
    ServiceError,
    read_record,
    write_record,
)
from tasks.health import answers
from tasks.storage import write_atomic

BACKOFF_MAX = 60.0
STOP_GRACE = 10.0
"""Seconds between SIGTERM and SIGKILL for a service that stopped answering."""
MARK = "[podracer supervisor]"
"""What starts the supervisor's lines in a service's log."""


@dataclass(frozen=True)
class Limits:
    """When to restart and when to give up (``services`` in params.yaml)."""

    health_grace: float
    restart_backoff: float
    restart_limit: int
    restart_window: float
    tick: float = 0.5  # seconds between two looks at the processes
    health_every: float = 5.0  # seconds between two health checks of a service that answers

    def delay(self, restarts: int) -> float:
        """Seconds before the next restart of a service restarted ``restarts`` times within the window."""
        return min(BACKOFF_MAX, self.restart_backoff * 2.0 ** restarts)

    @classmethod
    def of(cls, services: Mapping[str, float]) -> Limits:
        return cls(float(services["health_grace"]), float(services["restart_backoff"]),
                   int(services["restart_limit"]), float(services["restart_window"]),
                   health_every=min(5.0, float(services["health_grace"]) / 4))


def ended(returncode: int) -> str:
    """How a process ended, from its return code."""
    return f"killed by {signal.Signals(-returncode).name}" if returncode < 0 else f"exit code {returncode}"


def last_line(log: Path) -> str:
    """The service's own last line in ``log`` (not one the supervisor wrote there)."""
    try:
        with log.open("rb") as f:
            f.seek(max(0, f.seek(0, 2) - 4096))
            lines = [line for line in f.read().decode(errors="replace").splitlines()
                     if line.strip() and not line.startswith(MARK)]
    except OSError:
        return "(no log)"
    return lines[-1].strip() if lines else "(empty log)"


@dataclass
class Watched:
    """One service and what the supervisor knows of it (times are monotonic seconds)."""

    service: Service
    log: Path
    pid: int = 0
    child: subprocess.Popen | None = None  # None: adopted from an earlier supervisor
    since: float = 0.0  # (re)started
    heard: float = 0.0  # last answer (or start)
    checked: float = float("-inf")
    ready: bool = False  # answered since its last start
    took: float = 0.0
    restarts: list[float] = field(default_factory=list)  # within the window
    total: int = 0
    reason: str = ""
    due: float | None = None  # a restart is due then
    gave_up: bool = False

    def running(self) -> Running:
        state = ("gave up" if self.gave_up else "restarting" if self.due is not None
                 else "answers" if self.ready else "starting")
        return Running(self.service.name, self.pid, self.service.url, str(self.log), state, self.total,
                       self.reason, round(self.took, 2))


class Supervisor:
    """Starts the services, then restarts any that dies or stops answering."""

    def __init__(self, home: Path, services: list[Service], limits: Limits,
                 check: Callable[[str, Mapping[str, str]], bool] = answers, out: Callable[[str], None] = print):
        self.home, self.limits, self.check, self.out = home, limits, check, out
        self.watched = [Watched(s, home / f"{s.name}.log") for s in services]
        self.by_name = {w.service.name: w for w in self.watched}
        self.stopping = False

    def say(self, line: str, w: Watched | None = None) -> None:
        stamped = f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M:%S} {line}"
        self.out(stamped)
        if w is not None:
            with w.log.open("a") as log:
                log.write(f"{MARK} {stamped}\n")

    def record(self) -> None:
        write_record(self.home, [w.running() for w in self.watched if w.pid])

    def adopt(self, running: list[Running]) -> None:
        """Watch the services an earlier supervisor started that still run."""
        now = time.monotonic()
        for r in running:
            w = self.by_name.get(r.name)
            if w is not None and alive(r.pid):
                w.pid, w.since, w.heard, w.ready, w.took = r.pid, now, now, r.state == "answers", r.took
                w.total, w.reason = r.restarts, r.reason

    def spawn(self, w: Watched) -> None:
        with w.log.open("ab") as out:
            w.child = subprocess.Popen(w.service.command, stdout=out, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL,
                                       env={**os.environ, "PYTHONFAULTHANDLER": "1", **w.service.env},
                                       start_new_session=True)  # the fault handler: for processes.dump_stacks
        w.pid, w.since, w.heard, w.ready, w.due, w.checked = w.child.pid, time.monotonic(), time.monotonic(), \
            False, None, float("-inf")
        self.record()  # before the wait, so that `down` can stop a slow starter

    def start_all(self) -> None:
        """Start each service that does not run, at once, except one that goes through another
        (``needs``: the runner, through Prefect), which starts once that one answers; return
        when every one answers. A :class:`ServiceError` names the one that exited or did not
        answer in time. Started together, the servers' imports and migrations overlap: on two
        cores `up` takes the longest chain (Prefect, then the runner), not the sum."""
        waiting = [w for w in self.watched if not (w.pid and alive(w.pid))]
        starting: list[Watched] = []
        began = time.monotonic()
        while waiting or starting:
            if self.stopping:
                return
            for w in [w for w in waiting if all(self._answers(n) for n in w.service.needs if n in self.by_name)]:
                waiting.remove(w)
                starting.append(w)
                self.spawn(w)
            for w in list(starting):
                if self.check(w.service.health, w.service.headers):
                    starting.remove(w)
                    w.ready, w.took, w.heard = True, time.monotonic() - w.since, time.monotonic()
                    self.record()
                    self.say(f"{w.service.name} answers (pid {w.pid}, {w.took:.1f} s)")
                    continue
                assert w.child is not None
                if w.child.poll() is not None:
                    raise ServiceError(f"{w.service.name} exited with code {w.child.returncode}: "
                                       f"{last_line(w.log)} (log: {w.log})")
                if time.monotonic() - w.since > w.service.timeout:
                    raise ServiceError(f"{w.service.name} did not answer {w.service.health} within "
                                       f"{w.service.timeout:.0f} s (log: {w.log})")
            for w in waiting:
                if time.monotonic() - began > w.service.timeout:
                    raise ServiceError(f"{w.service.name} did not start: {', '.join(w.service.needs)} did not "
                                       f"answer within {w.service.timeout:.0f} s")
            time.sleep(0.3)

    def _answers(self, name: str) -> bool:
        """Whether ``name`` has answered since its start, or answers now (one an earlier
        supervisor started, adopted before it answered)."""
        w = self.by_name[name]
        return w.ready or (w.child is None and bool(w.pid) and self.check(w.service.health, w.service.headers))

    def tick(self) -> None:
        """One look at every service: restart what is due, notice what died or went silent."""
        for w in self.watched:
            if w.gave_up or not w.pid:
                continue
            now = time.monotonic()
            if w.due is not None:
                if now >= w.due:
                    w.total += 1
                    self.spawn(w)
                    self.say(f"{w.service.name} restarted (pid {w.pid}; restart {len(w.restarts)} of at most "
                             f"{self.limits.restart_limit} in {self.limits.restart_window:.0f} s)", w)
                continue
            why = self._exited(w) or self._silent(w, now)
            if why is not None:
                self.restart_later(w, why)

    def _exited(self, w: Watched) -> str | None:
        if w.child is not None:
            code = w.child.poll()
            if code is None:
                return None
            return ended(code) + (f": {last_line(w.log)}" if code > 0 else "")
        return None if alive(w.pid) else "exited (started by an earlier supervisor: exit status unknown)"

    def _silent(self, w: Watched, now: float) -> str | None:
        if w.ready and now - w.checked < self.limits.health_every:
            return None
        w.checked = now
        if self.check(w.service.health, w.service.headers):
            if not w.ready:
                w.ready, w.took = True, now - w.since
                self.record()
                self.say(f"{w.service.name} answers (pid {w.pid}, {w.took:.1f} s after its start)", w)
            w.heard = now
            return None
        needs = [self.by_name[n].service for n in w.service.needs if n in self.by_name]
        if any(not self.check(s.health, s.headers) for s in needs):
            w.heard = now  # it cannot answer while what it goes through does not
            return None
        limit = self.limits.health_grace if w.ready else w.service.timeout
        if now - w.heard <= limit:
            return None
        silent = now - w.heard
        dump_stacks(w.pid)
        stop(w.pid, twice=w.service.name in STOPPED_TWICE, grace=STOP_GRACE)
        if w.child is not None:
            w.child.poll()
        return f"health timeout: no answer from {w.service.health} for {silent:.0f} s; its stacks are in its log"

    def restart_later(self, w: Watched, why: str) -> None:
        """``w`` died (``why``): kill what is left of its group, then restart it after the
        backoff, or give up on a crash loop."""
        signal_group(w.pid, signal.SIGKILL)
        now = time.monotonic()
        w.ready = False
        w.restarts = [t for t in w.restarts if now - t < self.limits.restart_window]
        if len(w.restarts) >= self.limits.restart_limit:
            w.gave_up = True
            w.reason = (f"gave up after {len(w.restarts)} restarts in {self.limits.restart_window:.0f} s; "
                        f"last: {why}")
            self.say(f"{w.service.name} {w.reason}", w)
        else:
            delay = self.limits.delay(len(w.restarts))
            w.due, w.reason = now + delay, why
            w.restarts.append(now + delay)
            self.say(f"{w.service.name} {why}; restarting in {delay:.1f} s", w)
        self.record()

    def retry(self) -> None:
        """What ``podracer up`` asks of a running supervisor: restart now, with a fresh count,
        every service it gave up on."""
        for w in self.watched:
            if w.gave_up:
                w.gave_up, w.restarts = False, []
                self.spawn(w)
                self.say(f"{w.service.name} started again, as `podracer up` asked (pid {w.pid})", w)


def load(home: Path) -> tuple[list[Service], Limits]:
    plan = json.loads((home / PLAN).read_text())
    services = [Service(**{**s, "needs": tuple(s.get("needs", ()))}) for s in plan["services"]]
    return services, Limits.of(plan["limits"])


def main(argv: list[str] | None = None) -> int:
    home = Path((argv or sys.argv[1:])[0]).resolve()
    _, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, hard))  # a service aborted by dump_stacks leaves no core file
    me = {"pid": os.getpid(), "phase": "starting", "failure": "", "log": str(home / "supervisor.log"), "asked": 0}
    write_atomic(home / SUPERVISOR, json.dumps(me))
    sup = Supervisor(home, *load(home), out=lambda line: print(line, flush=True))
    retry = [False]

    def on_term(*_: object) -> None:
        sup.stopping = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGUSR1, lambda *_: retry.__setitem__(0, True))
    sup.adopt(read_record(home))
    try:
        sup.start_all()
    except ServiceError as err:
        sup.say(f"start failed: {err}")
        write_atomic(home / SUPERVISOR, json.dumps({**me, "phase": "failed", "failure": str(err)}))
        return 1  # `up` reads the failure and stops what was started (`podracer down`)
    write_atomic(home / SUPERVISOR, json.dumps({**me, "phase": "watching"}))
    sup.say(f"watching {len(sup.watched)} services: {asdict(sup.limits)}")
    while not sup.stopping:
        if retry[0]:
            retry[0] = False
            sup.retry()
            me["asked"] += 1  # `up` waits for this before it reads the services' states
            write_atomic(home / SUPERVISOR, json.dumps({**me, "phase": "watching"}))
        sup.tick()
        time.sleep(sup.limits.tick)
    sup.say("stopped (SIGTERM): the services are left to `podracer down`")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
