"""The trading client's journal: one record per cycle (account, bar, model version), planned then recorded.

A cycle writes its orders here *before* it submits them (``planned``) and its fills and
equity after (``recorded``, or ``halted``). A loop killed in between finds the planned
record when it restarts and resubmits exactly those orders, whose deterministic client
order ids the broker has already seen, so nothing is sent twice (docs/delivery.md). The
journal is the client's own SQLite file, the same for the local broker and Alpaca; its
records are keyed by the broker's account id, so a new paper account (a ledger removed, other
Alpaca keys) starts with none and never takes another account's cycles for its own.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from alpaca.trading.client import TradingClient

JOURNAL = "journal.db"
SCHEMA = """
CREATE TABLE IF NOT EXISTS trading_cycles (
    account TEXT NOT NULL, bar TEXT NOT NULL, model_version TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('planned', 'recorded', 'halted')), body TEXT NOT NULL,
    started_at TEXT NOT NULL, recorded_at TEXT, PRIMARY KEY (account, bar, model_version));
"""


class Journal:
    """The cycles of one broker account, in the SQLite file ``path`` (created on first use)."""

    def __init__(self, path: Path, account: str) -> None:
        self.path, self.account = path, account
        self._connection: sqlite3.Connection | None = None

    @classmethod
    def of(cls, client: TradingClient, path: Path) -> Journal:
        """The journal of the account ``client`` trades in."""
        return cls(path, str(client.get_account().id))

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        """The journal's connection, opened on first use and kept (a trading loop reads and
        writes it several times a bar), in a transaction committed when the block ends."""
        if self._connection is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=30)
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")  # as the broker's ledger: a killed process loses nothing
            db.executescript(SCHEMA)
            self._connection = db
        with self._connection as db:
            yield db

    def cycles(self, bar: str | None = None) -> list[dict[str, Any]]:
        """The account's records (of ``bar`` only, if given), oldest bar first."""
        sql = "SELECT * FROM trading_cycles WHERE account = ?" + (" AND bar = ?" if bar else "") + \
            " ORDER BY bar, started_at"
        with self._db() as db:
            rows = db.execute(sql, (self.account, bar) if bar else (self.account,)).fetchall()
        return [{**dict(r), "body": json.loads(r["body"])} for r in rows]

    def decided(self, version: str, before: str) -> Iterator[str]:
        """The bars before ``before`` on which ``version`` decided (not halted, not held), newest first."""
        sql = ("SELECT bar FROM trading_cycles WHERE account = ? AND model_version = ? AND bar < ? "
               "AND state != 'halted' AND coalesce(json_extract(body, '$.decided'), 1) ORDER BY bar DESC")
        with self._db() as db:
            for row in db.execute(sql, (self.account, version, before)):
                yield row["bar"]

    def put(self, record: dict[str, Any]) -> None:
        """Insert or update the record of (``bar``, ``model_version``): its ``state`` and ``body``."""
        now = datetime.now(timezone.utc).isoformat()
        with self._db() as db:
            db.execute("INSERT INTO trading_cycles VALUES (?, ?, ?, ?, ?, ?, ?) "
                       "ON CONFLICT (account, bar, model_version) DO UPDATE SET state = excluded.state, "
                       "body = excluded.body, recorded_at = excluded.recorded_at",
                       (self.account, str(record["bar"]), str(record["model_version"]), record["state"],
                        json.dumps(record["body"]), now, now if record["state"] != "planned" else None))
