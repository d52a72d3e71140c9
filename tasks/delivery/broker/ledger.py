"""The local broker's books: one SQLite file, one transaction per state change.

Tables: ``account`` (cash, the initial cash, ``last_equity``), ``clock`` (a simulated
clock's position), ``orders`` (``client_order_id`` unique), ``fills``, ``positions`` and
``cash_ledger`` (every cash movement with its running balance). WAL mode with
``synchronous=NORMAL``: a killed process loses nothing it acknowledged, and a transaction
is applied whole or not at all. One connection serves every thread, behind a lock, so each
request sees the books between transactions only.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS account (
    id TEXT PRIMARY KEY, account_number TEXT NOT NULL, created_at TEXT NOT NULL,
    initial_cash REAL NOT NULL, cash REAL NOT NULL, last_equity REAL NOT NULL, cost_pct REAL NOT NULL);
CREATE TABLE IF NOT EXISTS clock (
    id INTEGER PRIMARY KEY CHECK (id = 1), mode TEXT NOT NULL, day TEXT NOT NULL, phase TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS orders (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, client_order_id TEXT NOT NULL UNIQUE,
    symbol TEXT NOT NULL, side TEXT NOT NULL CHECK (side IN ('buy', 'sell')), type TEXT NOT NULL,
    time_in_force TEXT NOT NULL, qty INTEGER NOT NULL CHECK (qty > 0), limit_price REAL, status TEXT NOT NULL,
    created_at TEXT NOT NULL, updated_at TEXT NOT NULL, submitted_at TEXT NOT NULL, filled_at TEXT,
    canceled_at TEXT, expired_at TEXT, filled_qty INTEGER NOT NULL DEFAULT 0, filled_avg_price REAL);
CREATE INDEX IF NOT EXISTS orders_by_status ON orders (status);
CREATE TABLE IF NOT EXISTS fills (
    id INTEGER PRIMARY KEY AUTOINCREMENT, order_id TEXT NOT NULL REFERENCES orders (id), symbol TEXT NOT NULL,
    side TEXT NOT NULL, qty INTEGER NOT NULL CHECK (qty > 0), price REAL NOT NULL, cost REAL NOT NULL,
    day TEXT NOT NULL, at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS positions (
    symbol TEXT PRIMARY KEY, qty INTEGER NOT NULL CHECK (qty >= 0), cost_basis REAL NOT NULL);
CREATE TABLE IF NOT EXISTS cash_ledger (
    id INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL, amount REAL NOT NULL, balance REAL NOT NULL,
    reason TEXT NOT NULL, fill_id INTEGER REFERENCES fills (id));
"""
OPEN_STATUSES = ("new", "accepted", "partially_filled")
"""Statuses of orders that may still fill (Alpaca's ``status=open``)."""


@dataclass(frozen=True)
class FillRow:
    """One execution to book: the order, how many shares at what price, and the cost."""

    order_id: str
    symbol: str
    side: str
    qty: int
    price: float
    cost: float


class Ledger:
    """The SQLite books of one paper account."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.RLock()
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON", "busy_timeout=10000"):
            self._db.execute(f"PRAGMA {pragma}")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """One transaction: committed whole when the block ends, rolled back if it raises."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def rows(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(r) for r in self._db.execute(sql, args).fetchall()]

    def one(self, sql: str, args: Sequence[Any] = ()) -> dict[str, Any] | None:
        found = self.rows(sql, args)
        return found[0] if found else None

    # --- set-up -------------------------------------------------------------------------
    def initialise(self, initial_cash: float, cost_pct: float, mode: str, day: str, phase: str, now: str) -> bool:
        """Open a new account with ``initial_cash`` and a clock at (``day``, ``phase``); False if one exists."""
        with self.tx() as db:
            if db.execute("SELECT 1 FROM account").fetchone():
                return False
            number = "PA" + uuid.uuid4().hex[:10].upper()
            db.execute("INSERT INTO account VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (str(uuid.uuid4()), number, now, initial_cash, initial_cash, initial_cash, cost_pct))
            db.execute("INSERT INTO clock VALUES (1, ?, ?, ?)", (mode, day, phase))
            db.execute("INSERT INTO cash_ledger (at, amount, balance, reason) VALUES (?, ?, ?, 'deposit')",
                       (now, initial_cash, initial_cash))
            return True

    def account(self) -> dict[str, Any]:
        row = self.one("SELECT * FROM account")
        assert row is not None, "ledger has no account (initialise it first)"
        return row

    def clock(self) -> dict[str, Any]:
        row = self.one("SELECT * FROM clock")
        assert row is not None
        return row

    def positions(self) -> dict[str, dict[str, Any]]:
        return {r["symbol"]: r for r in self.rows("SELECT * FROM positions WHERE qty > 0 ORDER BY symbol")}

    def symbols(self) -> list[str]:
        """The symbols the account holds or has open orders in: those it needs prices of."""
        return [r["symbol"] for r in self.rows(
            "SELECT symbol FROM positions WHERE qty > 0 UNION SELECT symbol FROM orders "
            f"WHERE status IN {OPEN_STATUSES} ORDER BY symbol")]

    # --- orders -------------------------------------------------------------------------
    def order(self, column: str, value: str) -> dict[str, Any] | None:
        assert column in ("id", "client_order_id")
        return self.one(f"SELECT * FROM orders WHERE {column} = ?", (value,))

    def open_orders(self, db: sqlite3.Connection | None = None) -> list[dict[str, Any]]:
        sql = f"SELECT * FROM orders WHERE status IN {OPEN_STATUSES} ORDER BY seq"
        if db is not None:
            return [dict(r) for r in db.execute(sql).fetchall()]
        return self.rows(sql)

    @staticmethod
    def insert_order(db: sqlite3.Connection, order: dict[str, Any]) -> None:
        """Add an order (inside the caller's transaction); a duplicate client id raises IntegrityError."""
        columns = ", ".join(order)
        db.execute(f"INSERT INTO orders ({columns}) VALUES ({', '.join('?' * len(order))})", tuple(order.values()))

    @staticmethod
    def update_order(db: sqlite3.Connection, order_id: str, **fields: Any) -> None:
        sets = ", ".join(f"{k} = ?" for k in fields)
        db.execute(f"UPDATE orders SET {sets} WHERE id = ?", (*fields.values(), order_id))

    @staticmethod
    def book_fill(db: sqlite3.Connection, fill: FillRow, day: str, at: str) -> None:
        """Record one execution: the fill, the position, the order's filled quantity and the cash line.

        The account's cash itself is set by the caller from the batch's fill rule, so that
        it equals the env's arithmetic bit for bit; the cash lines replay it to the cent.
        """
        cursor = db.execute("INSERT INTO fills (order_id, symbol, side, qty, price, cost, day, at) "
                            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                            (fill.order_id, fill.symbol, fill.side, fill.qty, fill.price, fill.cost, day, at))
        notional = fill.qty * fill.price
        held = db.execute("SELECT qty, cost_basis FROM positions WHERE symbol = ?", (fill.symbol,)).fetchone()
        qty, basis = (held["qty"], held["cost_basis"]) if held else (0, 0.0)
        if fill.side == "buy":
            qty, basis, amount = qty + fill.qty, basis + notional, -(notional + fill.cost)
        else:
            basis, qty, amount = basis * (qty - fill.qty) / qty, qty - fill.qty, notional - fill.cost
        db.execute("INSERT INTO positions VALUES (?, ?, ?) ON CONFLICT (symbol) DO UPDATE SET qty = excluded.qty, "
                   "cost_basis = excluded.cost_basis", (fill.symbol, qty, basis))
        balance = db.execute("SELECT balance FROM cash_ledger ORDER BY id DESC LIMIT 1").fetchone()["balance"]
        db.execute("INSERT INTO cash_ledger (at, amount, balance, reason, fill_id) VALUES (?, ?, ?, ?, ?)",
                   (at, amount, balance + amount, f"{fill.side} {fill.qty} {fill.symbol}", cursor.lastrowid))
        order = db.execute("SELECT filled_qty, filled_avg_price FROM orders WHERE id = ?", (fill.order_id,)).fetchone()
        before = order["filled_qty"]
        average = ((order["filled_avg_price"] or 0.0) * before + notional) / (before + fill.qty)
        db.execute("UPDATE orders SET filled_qty = ?, filled_avg_price = ?, filled_at = ?, updated_at = ? "
                   "WHERE id = ?", (before + fill.qty, average, at, at, fill.order_id))

    @staticmethod
    def set_cash(db: sqlite3.Connection, cash: float) -> None:
        db.execute("UPDATE account SET cash = ?", (cash,))

    @staticmethod
    def set_clock(db: sqlite3.Connection, day: str, phase: str) -> None:
        db.execute("UPDATE clock SET day = ?, phase = ?", (day, phase))
