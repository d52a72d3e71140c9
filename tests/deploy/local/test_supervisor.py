"""The supervisor of ``podracer up`` keeps its services alive (docs/operations.md, The
supervisor): a service that is killed, exits or stops answering comes back with the same
command and environment, its reason recorded; backoff doubles; a crash loop stops after the
limit with one line; a service whose health check goes through another is not judged while
that one is down. The services are stand-ins that start in a few hundredths of a second
(tests/standins/service.py), the supervisor runs in this process, and the limits are short."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from deploy.local.processes import alive, stop
from deploy.local.services import Service, ServiceError, read_record
from deploy.local.supervisor import BACKOFF_MAX, Limits, Supervisor
from standins.postgres import free_port

STANDIN = Path(__file__).resolve().parents[2] / "standins" / "service.py"
LIMITS = Limits(health_grace=1.0, restart_backoff=0.2, restart_limit=3, restart_window=60.0, tick=0.05,
                health_every=0.2)


def standin(root: Path, name: str, needs: tuple[str, ...] = ()) -> Service:
    state = root / name
    state.mkdir(parents=True)
    port = free_port()
    return Service(name, [sys.executable, str(STANDIN), str(port), str(state)], {"STANDIN_TAG": f"tag-{name}"},
                   f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port}/health", {}, 10.0, needs)


def starts(root: Path, name: str) -> list[list[str]]:
    return [line.split() for line in (root / name / "starts").read_text().splitlines()]


@pytest.fixture
def supervise(tmp_path: Path) -> Iterator[Callable[..., Supervisor]]:
    made: list[Supervisor] = []

    def make(*names: str, needs: dict[str, tuple[str, ...]] | None = None) -> Supervisor:
        plan = [standin(tmp_path, n, (needs or {}).get(n, ())) for n in names]
        sup = Supervisor(tmp_path, plan, LIMITS, out=lambda _: None)
        made.append(sup)
        return sup

    yield make
    for sup in made:
        for w in sup.watched:
            if w.pid and alive(w.pid):
                stop(w.pid, grace=2.0)


def until(sup: Supervisor, what: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        assert time.monotonic() < deadline, "waited too long"
        sup.tick()
        time.sleep(sup.limits.tick)


def test_the_backoff_doubles_from_its_first_delay_up_to_a_minute():
    limits = Limits(health_grace=60, restart_backoff=1.5, restart_limit=5, restart_window=600)
    assert [limits.delay(k) for k in range(4)] == [1.5, 3.0, 6.0, 12.0]
    assert limits.delay(10) == BACKOFF_MAX == 60.0


def test_a_killed_service_comes_back_with_the_same_command_and_environment(tmp_path, supervise):
    sup = supervise("a", "b")
    sup.start_all()
    a, b = sup.by_name["a"], sup.by_name["b"]
    first = a.pid
    os.killpg(first, signal.SIGKILL)
    until(sup, lambda: a.ready and a.pid != first)
    assert (a.total, a.reason, b.total) == (1, "killed by SIGKILL", 0)
    (_, pid0, *how0), (_, pid1, *how1) = starts(tmp_path, "a")
    assert how1 == how0 and how0[-1] == "tag-a"  # argv and environment as at the first start
    assert (int(pid0), int(pid1)) == (first, a.pid)
    record = {r.name: r for r in read_record(tmp_path)}
    assert (record["a"].pid, record["a"].state, record["a"].restarts) == (a.pid, "answers", 1)
    assert record["a"].reason == "killed by SIGKILL" and record["b"].restarts == 0
    assert "a killed by SIGKILL; restarting in 0.2 s" in (tmp_path / "a.log").read_text()


def test_a_crash_loop_backs_off_doubling_then_stops_with_one_line(tmp_path, supervise):
    sup = supervise("a")
    sup.start_all()
    a = sup.by_name["a"]
    (tmp_path / "a" / "exit").write_text("3")
    os.killpg(a.pid, signal.SIGTERM)
    until(sup, lambda: a.gave_up)
    times = [float(line[0]) for line in starts(tmp_path, "a")]
    assert len(times) == 1 + LIMITS.restart_limit  # the first start and three restarts
    gaps = [later - earlier for earlier, later in zip(times[1:], times[2:], strict=False)]
    assert len(gaps) == 2
    for wait, gap in zip((0.4, 0.8), gaps, strict=True):  # each wait twice the one before, from 0.2 s
        assert wait <= gap < wait + 0.8, gaps
    line = "gave up after 3 restarts in 60 s; last: exit code 3: port taken"
    assert a.reason == line and "\n" not in line
    record = read_record(tmp_path)[0]
    assert (record.state, record.reason, record.restarts) == ("gave up", line, 3)
    assert f"a {line}" in (tmp_path / "a.log").read_text()
    for _ in range(20):  # nothing more is tried
        sup.tick()
        time.sleep(0.05)
    assert len(starts(tmp_path, "a")) == len(times)

    (tmp_path / "a" / "exit").unlink()  # `podracer up` again: a fresh count
    sup.retry()
    until(sup, lambda: a.ready)
    assert (a.gave_up, a.restarts, read_record(tmp_path)[0].state) == (False, [], "answers")


def test_a_service_that_stops_answering_is_stopped_and_restarted_after_the_grace(tmp_path, supervise):
    sup = supervise("a")
    sup.start_all()
    a = sup.by_name["a"]
    first, hung = a.pid, time.monotonic()
    (tmp_path / "a" / "hang").touch()
    until(sup, lambda: a.pid != first)
    assert time.monotonic() - hung >= LIMITS.health_grace
    assert not alive(first)
    assert a.reason.startswith(f"health timeout: no answer from {a.service.health} for ")
    assert a.reason.endswith("; its stacks are in its log")
    log = (tmp_path / "a.log").read_text()  # where the stand-in was when it stopped answering
    assert "Fatal Python error: Aborted" in log and ' in serve_forever' in log.split("Aborted", 1)[1]
    (tmp_path / "a" / "hang").unlink()
    until(sup, lambda: a.ready)
    assert a.total == 1


def test_a_service_is_not_judged_while_what_its_health_check_goes_through_is_down(tmp_path, supervise):
    sup = supervise("prefect", "runner", needs={"runner": ("prefect",)})
    prefect, runner = sup.by_name["prefect"], sup.by_name["runner"]
    (tmp_path / "runner" / "via").write_text(prefect.service.health)
    sup.start_all()
    hung = time.monotonic()
    (tmp_path / "prefect" / "hang").touch()
    until(sup, lambda: time.monotonic() - hung > 3 * LIMITS.health_grace)  # the runner fails its check all along
    assert prefect.total >= 1 and "health timeout" in prefect.reason
    assert runner.total == 0
    (tmp_path / "prefect" / "hang").unlink()
    until(sup, lambda: prefect.ready)
    assert runner.total == 0 and sup.check(runner.service.health, {})


def test_services_start_together_and_one_that_goes_through_another_once_that_one_answers(tmp_path, supervise):
    sup = supervise("prefect", "mlflow", "runner", needs={"runner": ("prefect",)})
    (tmp_path / "prefect" / "hang").touch()  # Prefect starts, but answers only a second later
    answered = []

    def answer() -> None:
        time.sleep(1.0)
        answered.append(time.time())
        (tmp_path / "prefect" / "hang").unlink()

    threading.Thread(target=answer).start()
    sup.start_all()
    (prefect, *_), (mlflow, *_), (runner, *_) = (starts(tmp_path, n)[0] for n in ("prefect", "mlflow", "runner"))
    assert float(mlflow) < answered[0]  # did not wait for Prefect
    assert float(runner) >= answered[0]  # its poll goes through Prefect: it waited
    assert all(w.ready for w in sup.watched)


def test_a_later_up_starts_the_runner_once_an_adopted_prefect_answers(tmp_path, supervise):
    first = supervise("prefect", "runner", needs={"runner": ("prefect",)})
    (tmp_path / "prefect" / "hang").touch()
    first.spawn(first.by_name["prefect"])  # an earlier supervisor, killed before Prefect answered
    later = Supervisor(tmp_path, [w.service for w in first.watched], LIMITS, out=lambda _: None)
    later.adopt(read_record(tmp_path))
    assert not later.by_name["prefect"].ready
    (tmp_path / "prefect" / "hang").unlink()
    later.start_all()  # did not wait for a readiness only its own start would have set
    assert later.by_name["runner"].ready and len(starts(tmp_path, "prefect")) == 1
    first.by_name["runner"].pid = later.by_name["runner"].pid  # one owner to stop it at the end


def test_a_service_that_fails_at_the_first_start_names_itself_and_its_log(tmp_path, supervise):
    sup = supervise("a", "b")
    (tmp_path / "b" / "exit").write_text("1")
    with pytest.raises(ServiceError, match=r"^b exited with code 1: port taken \(log: .*b\.log\)$"):
        sup.start_all()


def test_a_later_supervisor_adopts_what_runs_and_starts_nothing_twice(tmp_path, supervise):
    first = supervise("a")
    first.start_all()
    pid = first.by_name["a"].pid
    later = Supervisor(tmp_path, first.watched and [first.watched[0].service], LIMITS, out=lambda _: None)
    later.adopt(read_record(tmp_path))
    later.start_all()
    assert later.by_name["a"].pid == pid and len(starts(tmp_path, "a")) == 1
    os.killpg(pid, signal.SIGKILL)
    first.watched[0].child.wait()  # reaped by its parent, as init would
    a = later.by_name["a"]
    until(later, lambda: a.ready and a.pid != pid)
    assert a.reason == "exited (started by an earlier supervisor: exit status unknown)"
    first.watched[0].pid = a.pid  # one owner to stop it at the end
