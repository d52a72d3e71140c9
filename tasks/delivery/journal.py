"""The trading loop's journal: one record per cycle (bar and model version), planned then recorded.

A cycle writes its orders here *before* it submits them (``planned``) and its fills and
equity after (``recorded``). A loop killed in between finds the planned record when it
restarts and resubmits exactly those orders, whose deterministic client order ids the
broker has already seen, so nothing is sent twice. With the local broker the journal is
its ledger's ``cycles`` table, over HTTP; with Alpaca it is a local SQLite file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

import requests

from tasks.delivery.clock import iso, utc_now
from tasks.delivery.keys import Keys
from tasks.delivery.ledger import Ledger
from tasks.delivery.orders import BrokerError

STATES = ("planned", "recorded", "halted")


class Journal(Protocol):
    def cycles(self, bar: str | None = None) -> list[dict[str, Any]]: ...

    def put(self, record: dict[str, Any]) -> dict[str, Any]: ...


class BrokerJournal:
    """Cycle records in a ledger's ``cycles`` table."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger

    def cycles(self, bar: str | None = None) -> list[dict[str, Any]]:
        sql, args = ("SELECT * FROM cycles WHERE bar = ? ORDER BY id", (bar,)) if bar else (
            "SELECT * FROM cycles ORDER BY id", ())
        return [{**r, "body": json.loads(r["body"])} for r in self.ledger.rows(sql, args)]

    def put(self, record: Any) -> dict[str, Any]:
        """Insert or update the record of (``bar``, ``model_version``)."""
        if not isinstance(record, dict) or not {"bar", "model_version", "state", "body"} <= set(record):
            raise BrokerError(422, "a cycle record needs bar, model_version, state and body")
        if record["state"] not in STATES:
            raise BrokerError(422, f"state must be one of {', '.join(STATES)}")
        now = iso(utc_now())
        with self.ledger.tx() as db:
            db.execute("INSERT INTO cycles (bar, model_version, state, body, started_at, recorded_at) "
                       "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (bar, model_version) DO UPDATE SET "
                       "state = excluded.state, body = excluded.body, recorded_at = excluded.recorded_at",
                       (str(record["bar"]), str(record["model_version"]), record["state"],
                        json.dumps(record["body"]), now, now if record["state"] != "planned" else None))
        return self.cycles(str(record["bar"]))[-1]


class FileJournal(BrokerJournal):
    """Cycle records in a local SQLite file (the Alpaca broker keeps no journal for us)."""

    def __init__(self, path: Path) -> None:
        super().__init__(Ledger(path))


class HttpJournal:
    """The local broker's journal, over its ``/podracer/v1/cycles`` endpoint."""

    def __init__(self, url: str, keys: Keys, timeout: float = 30.0) -> None:
        self.url, self.timeout = url.rstrip("/") + "/podracer/v1/cycles", timeout
        self.headers = {"APCA-API-KEY-ID": keys.key_id, "APCA-API-SECRET-KEY": keys.secret}

    def _call(self, method: str, **kwargs: Any) -> Any:
        response = requests.request(method, self.url, headers=self.headers, timeout=self.timeout, **kwargs)
        if response.status_code != 200:
            raise BrokerError(response.status_code, f"journal: {response.text[:200]}")
        return response.json()

    def cycles(self, bar: str | None = None) -> list[dict[str, Any]]:
        return self._call("GET", params={"bar": bar} if bar else None)

    def put(self, record: dict[str, Any]) -> dict[str, Any]:
        return self._call("PUT", json=record)
