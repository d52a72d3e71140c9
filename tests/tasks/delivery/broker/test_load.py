"""The local paper broker under load and under SIGKILL: nothing acknowledged is lost, nothing half-applied.

Every test drives a real broker (no mocks) on 127.0.0.1 and then reads its SQLite ledger
through a connection of its own (:mod:`tests.tasks.delivery.broker.books`): what the ledger
holds is what the broker committed.
"""

from __future__ import annotations

import contextlib
import os
import random
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
from alpaca.common.exceptions import APIError
from alpaca.trading.client import TradingClient
from alpaca.trading.enums import OrderSide, TimeInForce
from alpaca.trading.requests import MarketOrderRequest

from tests.conftest import REPO
from tests.tasks.delivery.broker.books import HEADERS, assert_books_balance, hold, order_body, read, snapshot
from tests.tasks.delivery.broker.market import KEYS, SYMBOLS, market, write_bars


@dataclass
class Submission:
    """One planned order; ``original`` is the index of the submission whose client id it reuses."""

    index: int
    symbol: str
    side: str
    qty: int
    client_order_id: str
    original: int | None = None
    answer: tuple[int, Any] | None = None
    done: threading.Event = field(default_factory=threading.Event)


def load_plan(total: int, reused: int, threads: int, held: int, seed: int = 7) -> list[Submission]:
    """``total`` orders, buys and sells (never more sold per symbol than ``held``), over ``threads``
    (submission ``i`` goes to thread ``i % threads``); ``reused`` of them take the client id of an
    earlier submission of another thread, which they wait for, so the original always comes first."""
    rng = random.Random(seed)
    plan = []
    for i in range(total):
        side = rng.choice(("buy", "sell"))
        plan.append(Submission(i, rng.choice(SYMBOLS), side, rng.randint(1, 20) if side == "buy" else rng.randint(1, 5),
                               f"load-{i:04d}"))
    reusers = sorted(rng.sample(range(4 * threads, total), reused))
    taken = set(reusers)
    for i in reusers:
        candidates = [j for j in range(i - i % threads) if j not in taken and j % threads != i % threads]
        j = rng.choice(candidates)
        taken.add(j)
        plan[i] = Submission(i, plan[j].symbol, "buy", 1, plan[j].client_order_id, original=j)
    for symbol in SYMBOLS:
        assert sum(s.qty for s in plan if s.symbol == symbol and s.side == "sell") <= held
    return plan


def run_submissions(url: str, mine: list[Submission], plan: list[Submission]) -> None:
    """One client thread: its own ``TradingClient``, submitting its share of the plan in order."""
    client = TradingClient(KEYS.key_id, KEYS.secret, url_override=url)
    for submission in mine:
        try:
            if submission.original is not None:
                assert plan[submission.original].done.wait(60), "the original submission never finished"
            order = client.submit_order(MarketOrderRequest(
                symbol=submission.symbol, qty=submission.qty, side=OrderSide(submission.side),
                time_in_force=TimeInForce.DAY, client_order_id=submission.client_order_id))
            submission.answer = (200, str(order.id))
        except APIError as err:
            submission.answer = (err.status_code, err.code)
        except Exception as err:  # noqa: BLE001 - reported by the test, not lost with the thread
            submission.answer = (0, repr(err))
        finally:
            submission.done.set()


def test_load_from_16_clients_loses_and_duplicates_nothing_and_the_books_balance(tmp_path):
    """1,000 submissions from 16 concurrent alpaca-py clients, 100 of them reusing another's client
    order id: every 200 is in the ledger under its id, no client id twice, every reuse is 422
    ``40010001``; after the batch fills at the open, the fills replay to the cash and positions."""
    threads, held = 16, 3_000
    with market(tmp_path, cash=300_000.0) as m:
        db = m.broker.ledger.path
        hold(m, {symbol: held for symbol in SYMBOLS})
        before = {r["id"] for r in read(db, "SELECT id FROM orders")}
        plan = load_plan(total=1_000, reused=100, threads=threads, held=held)
        workers = [threading.Thread(target=run_submissions, args=(m.url, plan[t::threads], plan), daemon=True)
                   for t in range(threads)]
        started = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=120)
        elapsed = time.perf_counter() - started
        assert not any(w.is_alive() for w in workers), "a client thread hung"
        print(f"\nload: {len(plan)} submissions from {threads} clients in {elapsed:.1f} s "
              f"= {len(plan) / elapsed:.0f} orders/s (information only)")

        fresh = [s for s in plan if s.original is None]
        reuses = [s for s in plan if s.original is not None]
        assert [s.answer for s in fresh if s.answer[0] != 200] == [], "a valid order was refused"
        refused = (422, 40010001)
        assert all(s.answer == refused for s in reuses), [s.answer for s in reuses if s.answer != refused]

        rows = [r for r in read(db, "SELECT * FROM orders") if r["id"] not in before]
        acknowledged = {s.answer[1]: s for s in fresh}
        assert len(rows) == len(acknowledged) == 900, \
            "the ledger holds a different number of orders than were acknowledged"
        by_id = {r["id"]: r for r in rows}
        assert set(by_id) == set(acknowledged), "an acknowledged order is missing from the ledger"
        assert len({r["client_order_id"] for r in rows}) == len(rows), "a client order id is in the ledger twice"
        for order_id, s in acknowledged.items():
            row = by_id[order_id]
            assert (row["client_order_id"], row["symbol"], row["side"], row["qty"]) == (
                s.client_order_id, s.symbol, s.side, s.qty), "a reuse changed the original order"

        assert m.advance("open").status_code == 200
        statuses = {r["status"] for r in read(db, "SELECT status FROM orders")}
        assert statuses <= {"filled", "canceled"}, statuses
        assert_books_balance(db)
        sells = read(db, "SELECT status, COUNT(*) AS n FROM orders WHERE side = 'sell' GROUP BY status")
        assert sells == [{"status": "filled", "n": sum(s.side == "sell" for s in fresh)}], sells
        scaled = read(db, "SELECT COUNT(*) AS n FROM orders WHERE side = 'buy' AND filled_qty < qty")
        assert scaled[0]["n"] > 0, "the buys were meant to exceed the cash and be scaled pro rata"


# --- crashes --------------------------------------------------------------------------------------
LAUNCHER = """
import sys, time
from datetime import date
from pathlib import Path
from tasks.delivery.broker.paper import PaperBroker
from tasks.delivery.broker.ledger import Ledger
from tasks.delivery.broker.accounts import Exchange
from tasks.delivery.broker.service import BrokerServer
from tests.tasks.delivery.broker.market import COST, KEYS
db, bars, cash, stall_at = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
if stall_at:  # the test's crash point: stall inside the fill transaction, after booking stall_at fills
    book, booked = Ledger.book_fill, []
    def stalling(*args):
        book(*args)
        booked.append(1)
        if len(booked) == stall_at:
            print("stalled", flush=True)
            time.sleep(600)
    Ledger.book_fill = staticmethod(stalling)
broker = PaperBroker.open(db, bars, initial_cash=cash, cost_pct=COST, mode="simulated", start=date(2023, 6, 30))
with BrokerServer(Exchange(broker, KEYS)) as server:
    print(server.url, flush=True)
    while True:
        time.sleep(3600)
"""


class BrokerProcess:
    """The broker in a Python process of its own, serving the ledger ``db``; :meth:`kill` is SIGKILL, by PID.

    With ``stall_at`` it stalls in the middle of the next fill transaction, after booking that
    many fills, and says so on stdout (:meth:`wait_for_stall`): a deterministic crash point.
    """

    def __init__(self, db: Path, bars: Path, cash: float, log: Path, stall_at: int = 0) -> None:
        self.log = log.open("ab")
        self.process = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(db), str(bars), str(cash),
                                         str(stall_at)], cwd=REPO, stdout=subprocess.PIPE, stderr=self.log,
                                        env={**os.environ, "PYTHONPATH": str(REPO)})
        self.url = self._line(120)
        if not self.url.startswith("http://127.0.0.1:"):
            self.kill()
            raise AssertionError(f"the broker process did not start: {log.read_text()[-2000:]}")

    def _line(self, timeout: float) -> str:
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        return self.process.stdout.readline().decode().strip() if ready else ""

    def wait_for_stall(self) -> None:
        assert self._line(120) == "stalled", "the broker never reached its crash point"

    def post(self, path: str, timeout: float = 30, **kwargs: Any) -> requests.Response:
        return requests.post(self.url + path, headers=HEADERS, timeout=timeout, **kwargs)

    def kill(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        self.process.stdout.close()
        self.log.close()


class Load:
    """Threads submitting small queued orders to ``url`` until told to stop or the broker dies;
    ``acked`` holds (client id, order id) of every order answered 200."""

    def __init__(self, url: str, threads: int, tag: str, sells: dict[str, int]) -> None:
        self.url, self.tag, self.stop = url, tag, threading.Event()
        self.acked: list[tuple[str, str]] = []
        self.refused: list[str] = []
        self.sells, self.lock = dict(sells), threading.Lock()
        self.workers = [threading.Thread(target=self._run, args=(t,), daemon=True) for t in range(threads)]
        for worker in self.workers:
            worker.start()

    def _next(self, rng: random.Random) -> tuple[str, str, int]:
        symbol = rng.choice(SYMBOLS)
        with self.lock:  # sell only what no other queued sell holds, so every order is valid
            if rng.random() < 0.3 and self.sells[symbol] >= 3:
                self.sells[symbol] -= 3
                return symbol, "sell", 3
        return symbol, "buy", rng.randint(1, 20)

    def _run(self, thread: int) -> None:
        rng, session = random.Random(thread), requests.Session()
        k = 0
        while not self.stop.is_set():
            symbol, side, qty = self._next(rng)
            cid = f"{self.tag}-{thread}-{k}"
            k += 1
            try:
                response = session.post(f"{self.url}/v2/orders", headers=HEADERS, timeout=30,
                                        json=order_body(symbol, float(qty), side, client_order_id=cid))
            except requests.RequestException:
                return  # the broker is gone
            with self.lock:
                if response.status_code == 200:
                    self.acked.append((cid, response.json()["id"]))
                else:
                    self.refused.append(f"{response.status_code} {response.text[:200]}")

    def wait_for(self, count: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while len(self.acked) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(self.acked) >= count, f"only {len(self.acked)} orders acknowledged"

    def join(self) -> None:
        self.stop.set()
        for worker in self.workers:
            worker.join(timeout=60)
        assert not any(w.is_alive() for w in self.workers)
        assert self.refused == [], f"valid orders were refused: {self.refused[:3]}"


def test_sigkill_during_load_and_inside_a_fill_transaction_loses_and_half_applies_nothing(tmp_path):
    """A broker process killed with SIGKILL, first while 8 threads submit orders, then inside the
    transaction that fills the orders queued for an open (after booking half of them), restarts on
    the same ledger with every acknowledged order in it, ``PRAGMA integrity_check`` ok and the books
    balancing; the killed open left nothing (clock, queue and fills as before), and the restarted
    broker then fills the whole queue and still balances."""
    db, bars, log = tmp_path / "broker.db", tmp_path / "bars.parquet", tmp_path / "broker.log"
    cash, held = 300_000.0, 2_000
    write_bars(bars)
    processes: list[BrokerProcess] = []

    def start(stall_at: int = 0) -> BrokerProcess:
        processes.append(BrokerProcess(db, bars, cash, log, stall_at))
        return processes[-1]

    def check_recovered(acked: list[tuple[str, str]]) -> None:
        assert read(db, "PRAGMA integrity_check") == [{"integrity_check": "ok"}]
        in_ledger = {(r["client_order_id"], r["id"]) for r in read(db, "SELECT client_order_id, id FROM orders")}
        lost = set(acked) - in_ledger
        assert not lost, f"{len(lost)} acknowledged orders are missing after the crash, e.g. {sorted(lost)[:3]}"
        assert_books_balance(db)

    try:
        broker = start()
        for symbol in SYMBOLS:
            assert broker.post("/v2/orders", json=order_body(symbol, float(held))).status_code == 200
        for to in ("open", "close"):
            assert broker.post("/podracer/v1/clock/advance", params={"to": to}).status_code == 200

        load = Load(broker.url, threads=8, tag="a", sells={s: held // 2 for s in SYMBOLS})
        load.wait_for(200)
        broker.kill()  # in the middle of the submissions
        load.join()
        acked = list(load.acked)
        broker = start()
        check_recovered(acked)
        queued = read(db, "SELECT id, status, filled_qty FROM orders WHERE status = 'accepted' ORDER BY seq")
        assert len(queued) >= 200
        broker.kill()

        broker = start(stall_at=len(queued) // 2)
        before = snapshot(db)
        stalled = broker

        def advance_until_killed() -> None:
            with contextlib.suppress(requests.ConnectionError):  # the kill below closes it unanswered
                stalled.post("/podracer/v1/clock/advance", params={"to": "open"}, timeout=600)

        advancing = threading.Thread(target=advance_until_killed, daemon=True)
        advancing.start()
        broker.wait_for_stall()
        broker.kill()  # inside the fill transaction, half its fills booked
        broker = start()
        check_recovered(acked)
        after = snapshot(db)
        for table in ("clock", "orders", "fills", "positions", "cash_ledger", "account"):
            assert after[table] == before[table], f"the killed open left changes in {table}"

        assert broker.post("/podracer/v1/clock/advance", params={"to": "open"}).status_code == 200
        assert read(db, "SELECT COUNT(*) AS n FROM orders WHERE status = 'accepted'") == [{"n": 0}]
        assert_books_balance(db)
    finally:
        for process in processes:
            process.kill()
