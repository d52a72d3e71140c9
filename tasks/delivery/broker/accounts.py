"""The broker's paper accounts: one per key pair, as at Alpaca, on one market and one clock.

The main account (the champion's, ``data/broker/broker.db``) is open from the start; the
others (the shadow's, ``broker-shadow.db`` beside it) open on the first request that carries
their keys, at the clock where the main account stands (docs/delivery.md, Shadow accounts).
Every account trades the same feed with the same fill rule (:mod:`tasks.delivery.broker.fills`),
and a simulated clock advanced through any account moves them all, so no account ever sees
a price the others have not.
"""

from __future__ import annotations

import hmac
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tasks.delivery.broker.paper import PaperBroker
from tasks.delivery.keys import CHAMPION, Keys
from tasks.errors import ConfigError

Opener = Callable[[PaperBroker], PaperBroker]
"""Opens an account's ledger like the main account (:meth:`PaperBroker.open` with ``like``)."""


@dataclass
class Account:
    role: str
    keys: Keys
    open: Opener | None = None
    broker: PaperBroker | None = None


class Exchange:
    """The paper accounts one broker serves, each reached by its own key pair."""

    def __init__(self, main: PaperBroker, keys: Keys, others: Mapping[str, tuple[Keys, Opener]] | None = None) -> None:
        self.main = main
        self.accounts = [Account(CHAMPION, keys, broker=main),
                         *(Account(role, k, open=opener) for role, (k, opener) in (others or {}).items())]
        ids = [a.keys.key_id for a in self.accounts]
        if len(set(ids)) != len(ids):
            raise ConfigError("broker: two accounts have the same API key id; each account needs its own key pair")
        self._lock = threading.Lock()

    def account(self, key_id: bytes, secret: bytes) -> PaperBroker | None:
        """The account whose keys these are (opened on first use), or None for unknown keys."""
        found = None
        for account in self.accounts:  # compare with every account's keys: the time taken says nothing
            if hmac.compare_digest(key_id, account.keys.key_id.encode()) & \
                    hmac.compare_digest(secret, account.keys.secret.encode()):
                found = account
        return None if found is None else self._opened(found)

    def _opened(self, account: Account) -> PaperBroker:
        with self._lock:
            if account.broker is None:
                assert account.open is not None
                self.main.catch_up()
                broker = account.open(self.main)
                try:
                    broker.follow(self.main)
                except Exception:
                    broker.ledger.close()
                    raise
                account.broker = broker
            return account.broker

    def advance(self, to: str) -> dict[str, Any]:
        """Advance the simulated clock of every account: the main one first, then each open
        other one follows it (an account opened later starts where the main one stands)."""
        with self._lock:
            clock = self.main.advance(to)
            for account in self.accounts[1:]:
                if account.broker is not None:
                    account.broker.follow(self.main)
        return clock

    def close(self) -> None:
        for account in self.accounts:
            if account.broker is not None:
                account.broker.ledger.close()
