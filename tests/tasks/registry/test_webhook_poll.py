"""The registry poll that covers lost webhooks (:class:`tasks.registry.webhook.Poller`): a champion
not yet delivered is announced again after an interval, ever less often while it stays so."""

from __future__ import annotations

import logging
import threading
from functools import partial
from typing import Any

import pytest

from tasks.registry.webhook import MAX_WAITS, PROMOTED, Poller, polled_promotion, undelivered

MODEL = "podracer-policy"


class Registry:
    """Fake champion/delivered state with a hand-wound clock."""

    def __init__(self) -> None:
        self.champion: str | None = "1"
        self.delivered: str | None = "1"
        self.now = 1000.0
        self.down = False
        self.busy = False
        self.emitted: list[dict[str, Any]] = []

    def lag(self) -> tuple[str, str | None] | None:
        if self.down:
            raise ConnectionError("mlflow is down")
        return undelivered(self.champion, self.delivered)

    def poller(self, interval_s: float = 60.0) -> Poller:
        return Poller(f"{MODEL}@champion", self.lag, partial(polled_promotion, MODEL), self.emitted.append,
                      interval_s, busy=lambda: self.busy, clock=lambda: self.now)


def test_undelivered_is_a_champion_that_has_not_traded() -> None:
    assert undelivered(None, None) is None and undelivered(None, "1") is None  # no champion: nothing to deliver
    assert undelivered("2", "2") is None and undelivered(2, "2") is None  # type: ignore[arg-type]
    assert undelivered("2", None) == ("2", None)  # never delivered
    assert undelivered("3", "2") == ("3", "2")


def test_poller_quiet_while_delivered_matches_champion() -> None:
    reg = Registry()
    poller = reg.poller()
    for _ in range(5):
        assert poller.tick() is None
        reg.now += 100
    reg.champion = None  # no champion yet: nothing to deliver
    assert poller.tick() is None
    reg.now += 100
    assert poller.tick() is None
    assert reg.emitted == []


def test_poller_emits_after_an_interval_then_retries_ever_less_often_until_delivered() -> None:
    reg = Registry()
    poller = reg.poller(interval_s=60)
    reg.champion = "2"
    assert poller.tick() is None  # first sight of the mismatch: only noted
    reg.now += 59
    assert poller.tick() is None  # the webhook may still land
    reg.now += 1
    assert poller.tick() == "2"
    assert len(reg.emitted) == 1
    payload = reg.emitted[0]["payload"]
    assert reg.emitted[0]["event"] == PROMOTED
    assert (payload["version"], payload["via"]) == ("2", "poll")
    assert payload["delivery_id"].startswith("poll-2-")
    reg.now += 119
    assert poller.tick() is None  # the second wait is twice the first
    reg.now += 1
    assert poller.tick() == "2"  # still undelivered: retry
    reg.now += 239
    assert poller.tick() is None
    reg.now += 1
    assert poller.tick() == "2"  # and the third twice that
    for _ in range(10):  # the wait stops growing at MAX_WAITS intervals
        reg.now += 60 * MAX_WAITS
        assert poller.tick() == "2"
    assert len(reg.emitted) == 13
    reg.delivered = "2"
    for _ in range(3):
        reg.now += 60 * MAX_WAITS
        assert poller.tick() is None
    assert len(reg.emitted) == 13
    reg.champion = "3"  # a new mismatch waits one interval again
    assert poller.tick() is None
    reg.now += 60
    assert poller.tick() == "3"


def test_poller_waits_while_the_mismatch_is_worked_on_then_one_interval_after() -> None:
    reg = Registry()
    poller = reg.poller(interval_s=60)
    reg.champion, reg.busy = "2", True
    assert poller.tick() is None
    for _ in range(5):  # however long the work takes
        reg.now += 100
        assert poller.tick() is None
    reg.busy = False  # it ended (crashed, failed) without catching up
    assert poller.tick() is None
    reg.now += 59
    assert poller.tick() is None
    reg.now += 1
    assert poller.tick() == "2"
    reg.busy = True  # the emitted event started the work again
    reg.now += 1000
    assert poller.tick() is None
    reg.busy = False
    reg.now += 60
    assert poller.tick() is None  # a retry after a retry waits twice as long
    reg.now += 60
    assert poller.tick() == "2"


def test_poller_restarts_the_wait_for_a_new_version_and_after_catching_up() -> None:
    reg = Registry()
    poller = reg.poller(interval_s=60)
    reg.champion = "2"
    poller.tick()
    reg.now += 50
    reg.champion = "3"  # moved again before the wait ended: wait afresh for v3
    assert poller.tick() is None
    reg.now += 59
    assert poller.tick() is None
    reg.now += 1
    assert poller.tick() == "3"
    reg.delivered = "3"
    assert poller.tick() is None
    reg.delivered = "2"  # the trading side later falls back to v2 (a rollback, a restart)
    reg.now += 1000
    assert poller.tick() is None  # a fresh mismatch: v3's old wait does not carry over
    reg.now += 60
    assert poller.tick() == "3"
    reg.delivered = "3"
    assert poller.tick() is None
    reg.champion = "4"
    reg.now += 1000
    assert poller.tick() is None  # nor into v4's
    assert [e["payload"]["version"] for e in reg.emitted] == ["3", "3"]


def test_poller_survives_mlflow_being_down(caplog: pytest.LogCaptureFixture) -> None:
    reg = Registry()
    poller = reg.poller(interval_s=60)
    reg.champion, reg.down = "2", True
    with caplog.at_level(logging.WARNING, logger="tasks.registry.webhook"):
        assert poller.tick() is None
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "mlflow is down" in caplog.records[0].getMessage()
    assert reg.emitted == []
    reg.down = False
    assert poller.tick() is None  # back up: now the wait starts
    reg.now += 60
    assert poller.tick() == "2"


def test_poller_run_loops_and_stops() -> None:
    reg = Registry()
    reg.champion, reg.down = "2", True
    stop = threading.Event()
    ticks: list[str | None] = []
    poller = reg.poller(interval_s=0.01)
    original = poller.tick

    def counting_tick() -> str | None:
        ticks.append(original())
        if len(ticks) >= 3:
            stop.set()
        return ticks[-1]

    poller.tick = counting_tick  # type: ignore[method-assign]
    thread = threading.Thread(target=poller.run, args=(stop,), daemon=True)
    thread.start()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert ticks == [None, None, None]  # raising lag() did not end the loop


def test_poller_run_survives_emit_failures() -> None:
    stop = threading.Event()
    polls: list[int] = []
    attempts: list[dict[str, Any]] = []

    def lag() -> tuple[str, str]:
        polls.append(1)
        if len(polls) >= 4:
            stop.set()
        return "2", "1"

    def emit(event: dict[str, Any]) -> None:
        attempts.append(event)
        raise ConnectionError("prefect is down")

    poller = Poller(MODEL, lag, partial(polled_promotion, MODEL), emit, interval_s=0.0, clock=lambda: 0.0)
    thread = threading.Thread(target=poller.run, args=(stop,), daemon=True)
    thread.start()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert len(attempts) == 3  # the first poll only noted the mismatch; each later one retried


def test_poller_waits_anew_when_delivery_moved_between_two_polls() -> None:
    reg = Registry()
    poller = reg.poller(interval_s=60)
    reg.champion, reg.delivered = "1", "2"  # a rollback to v1 is on its way
    assert poller.tick() is None
    # between two polls the webhook delivered v1, the alias went to v3 and was delivered, then back to v1
    reg.delivered = "3"
    reg.now += 60
    assert poller.tick() is None  # the same champion, but a new mismatch: its webhook may still land
    reg.now += 60
    assert poller.tick() == "1"
