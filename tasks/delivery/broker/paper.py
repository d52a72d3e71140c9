"""The local paper broker: one account, its orders and fills, on the project's own market.

This is the part of Alpaca's Trading API v2 that ``TradingClient`` uses (docs/delivery.md), as
plain methods that return Alpaca's JSON shapes and raise :class:`BrokerError` with
Alpaca's status codes; :mod:`tasks.delivery.broker.api` puts them on HTTP. Orders follow
Alpaca's lifecycle: placed while the market is closed they are ``accepted`` and fill at
the next session's open, in one batch by the env's rule (:mod:`tasks.delivery.broker.fills`);
during a simulated session a market order fills at once at the session's open price. What
each clock event does to the orders is :mod:`tasks.delivery.broker.events`.
Where this differs from Alpaca's real fills is in ``docs/delivery.md``.

On **minute bars** every bar is a small session of its own inside the day's: its open and its
close are the clock's events, an order placed at a bar's close fills at the next bar's open
(``accepted`` until then), and what belongs to the day's session (``last_equity``, ``cls``
fills, the expiry of ``day`` orders) happens at the session's first open and its last close,
13:00 New York time on a half day. An order placed after the last close is for the next session.

In a ragged universe (docs/data.md) nothing fills in a session where the symbol has no real bar
(not yet listed, halted, delisted: ``Feed.real``): its orders stay open as if the symbol did
not trade, so a ``day`` order expires at that session's close, an ``opg`` or ``cls`` one is
canceled once its auction has passed, and a ``gtc`` one waits for a real bar. Positions in it
are marked at its last real close, the price the feed carries there.
"""

from __future__ import annotations

import math
import sqlite3
import uuid
from collections.abc import Callable
from datetime import date, datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np

from tasks.delivery.broker.alpaca_shapes import BrokerError, OrderRequest, money, order_json, parse_order, position_json
from tasks.delivery.broker.clock import ClockView, Phase, iso, utc_now
from tasks.delivery.broker.events import close_event, open_event
from tasks.delivery.broker.feed import Feed, FeedSource
from tasks.delivery.broker.fills import fill_batch, marketable, remaining
from tasks.delivery.broker.ledger import OPEN_STATUSES, Ledger
from tasks.errors import ConfigError

ClockMode = Literal["simulated", "wall"]


class PaperBroker:
    """An Alpaca-compatible paper account over a SQLite ledger and a replayable feed."""

    def __init__(self, ledger: Ledger, feed: FeedSource, mode: ClockMode,
                 now: Callable[[], datetime] = utc_now) -> None:
        self.ledger, self.feed, self.mode, self._now = ledger, feed, mode, now
        self.calendar = feed.calendar
        self._carries: Feed | None = None
        """The last feed found to have bars of every symbol the account holds or has open orders in."""

    @classmethod
    def open(cls, db: Path, bars: Path, *, initial_cash: float, cost_pct: float, mode: ClockMode,
             start: date | datetime | None = None, now: Callable[[], datetime] = utc_now,
             like: PaperBroker | None = None, sessions: int | None = None) -> PaperBroker:
        """Open the account in ``db``, creating it with ``initial_cash`` and a clock standing at
        the close of the bar ``start`` (a session's date, or a minute bar's start; a date on minute
        bars is that session's last bar; default: the feed's latest bar) if the file is new.

        ``sessions``: minute bars are read as a trailing window of this many sessions (None:
        all), kept back to the bar the clock stands on. ``like``: another account of the same
        market (docs/delivery.md, Shadow accounts). This one then shares its feed, calendar and
        clock mode, and a new one starts where its clock stands; :meth:`follow` brings an older
        one level with it.
        """
        feed = like.feed if like is not None else FeedSource(bars, sessions)
        if start is not None:
            feed.keep(start)
        market = feed.current()
        bar = market.find(start) if start is not None else len(market) - 1
        if bar is None:
            raise ConfigError(f"broker: {start} is not a bar of {bars}")
        at, phase = market.key(bar), "close"
        if like is not None:
            mode, now = like.mode, like._now
            at, phase = like.ledger.clock()["day"], like.ledger.clock()["phase"]
        ledger = Ledger(db)
        ledger.initialise(initial_cash, cost_pct, mode, at, phase, iso(now()))
        stored = ledger.clock()["mode"]
        if stored != mode:
            ledger.close()
            raise ConfigError(f"broker: {db} keeps a {stored} clock; start it with that clock, or remove the file")
        feed.keep(ledger.clock()["day"])
        broker = cls(ledger, feed, mode, now)
        if like is None:
            market = feed.current()
            broker.calendar.schedule(market.day(0), market.day(len(market) - 1))  # build it before any request
        return broker

    # --- the clock ------------------------------------------------------------------------
    def _position(self, feed: Feed) -> tuple[int, Phase]:
        """The clock's bar (an index into the feed) and phase.

        Every price and clock event of the account goes through here, so this is where a feed
        that can no longer carry the account is refused, in one line that says how to recover
        (docs/delivery.md, The market): the clock's bar is gone (another market), or a symbol the
        account holds or has open orders in is (the universe changed). Such a position can be
        neither valued nor sold, as no price of it is left. The symbols are looked at once a feed
        (a read of the bars file): orders are accepted only in the feed's symbols, so none can
        leave it until the file changes, and a scan of every open order on every request would
        make a queue of them quadratic.
        """
        clock = self.ledger.clock()
        bar = feed.find(clock["day"])
        if bar is None:
            raise BrokerError(500, f"the broker's clock stands at {clock['day']}, which the feed no longer has: "
                                   "its paper account traded another market (data.source or dates changed); "
                                   f"remove {self.ledger.path} to open a new account, or use another data_dir")
        if feed is not self._carries:
            gone = [s for s in self.ledger.symbols() if s not in feed.symbols]
            if gone:
                raise BrokerError(500, f"the paper account holds or has open orders in {', '.join(gone)}, which the "
                                       f"price feed ({self.feed.path}) has no bars of: the broker can neither value, "
                                       "fill nor close them, nor move the clock; put their bars back (`podracer "
                                       "ingest` and `podracer validate` with the symbols that traded them), or remove "
                                       f"{self.ledger.path} to open a new account")
            self._carries = feed
        return bar, clock["phase"]

    def clock(self) -> dict[str, Any]:
        self.catch_up()
        view = self._view()
        return {"timestamp": iso(view.timestamp), "is_open": view.is_open, "next_open": iso(view.next_open),
                "next_close": iso(view.next_close)}

    def _view(self) -> ClockView:
        if self.mode == "wall":
            return self.calendar.wall(self._now())
        feed = self.feed.current()
        bar, phase = self._position(feed)
        return self.calendar.wall(feed.instants(bar, self.calendar)[phase == "close"])

    def now(self) -> str:
        return iso(self._view().timestamp)

    def catch_up(self) -> None:
        """Wall clock: run every session event that has happened and whose bar the feed has."""
        if self.mode != "wall":
            return
        while self._step(until=self._now()):
            pass

    def advance(self, to: str = "next") -> dict[str, Any]:
        """Simulated clock: run the next event (``open``, ``close``), or both events of the next bar (``bar``)."""
        if self.mode != "simulated":
            raise BrokerError(409, "the clock follows the time of day; only a simulated clock can be advanced")
        if to not in ("next", "open", "close", "bar"):
            raise BrokerError(422, "to must be one of next, open, close, bar")
        feed = self.feed.current()
        _, phase = self._position(feed)
        if to == "bar" or (to == "close" and phase == "close") or (to == "open" and phase == "open"):
            self._step()
        self._step()
        return self.clock()

    def moment(self) -> tuple[int, int]:
        """Where the clock stands in the order of events: (the feed's bar, 0 at its open, 1 at its close)."""
        bar, phase = self._position(self.feed.current())
        return bar, int(phase == "close")

    def follow(self, leader: PaperBroker) -> None:
        """Run this account's clock events up to where ``leader``'s clock stands: one market clock
        for every account of a broker (docs/delivery.md, Shadow accounts). A wall clock needs
        none of this (each account catches up with the time of day)."""
        if self.mode != "simulated":
            return
        target = leader.moment()
        while self.moment() < target:
            self._step()
        if self.moment() != target:
            raise BrokerError(500, f"the clock of {self.ledger.path} stands after that of {leader.ledger.path}: "
                                   "they are not one market; remove the first file to open a new account")

    def _step(self, until: datetime | None = None) -> bool:
        """Run the clock's next event; with ``until``, only if it happened by then. Returns whether one ran.

        The clock is read inside the event's transaction, so two processes on one ledger
        never run the same event twice.
        """
        feed = self.feed.current()
        with self.ledger.tx() as db:
            bar, phase = self._position(feed)
            target = bar if phase == "open" else bar + 1
            if target >= len(feed):
                if until is None:
                    raise BrokerError(409, f"the feed has no bar after {feed.key(bar)}: "
                                           "new bars arrive with ingest (or `podracer simulate`)")
                return False
            opens, closes = feed.instants(target, self.calendar)
            if until is not None and (closes if phase == "open" else opens) > until:
                return False
            (close_event if phase == "open" else open_event)(self.ledger, db, feed, target, self.calendar)
        return True

    # --- prices and the account ----------------------------------------------------------
    def _prices(self, feed: Feed) -> tuple[np.ndarray, np.ndarray]:
        """The latest price of every symbol (the bar's open while it trades, else its close) and
        the previous session's close; where a symbol has no real bar, the feed carries its last
        real close in both."""
        bar, phase = self._position(feed)
        latest = feed.open[bar] if phase == "open" else feed.close[bar]
        before = feed.session_start(bar) - 1
        return latest, feed.close[before] if before >= 0 else latest

    def account(self) -> dict[str, Any]:
        self.catch_up()
        feed = self.feed.current()
        last, _ = self._prices(feed)
        row = self.ledger.account()
        held = sum(p["qty"] * last[feed.column(s)] for s, p in self.ledger.positions().items())
        reserved = sum(remaining(o) * last[feed.column(o["symbol"])] * (1 + row["cost_pct"])
                       for o in self.ledger.open_orders() if o["side"] == "buy")
        power = money(max(row["cash"] - reserved, 0.0))
        zero = "0"
        return {
            "id": row["id"], "account_number": row["account_number"], "status": "ACTIVE", "currency": "USD",
            "cash": money(row["cash"]), "buying_power": power, "regt_buying_power": power,
            "non_marginable_buying_power": power, "daytrading_buying_power": zero, "equity": money(row["cash"] + held),
            "last_equity": money(row["last_equity"]), "portfolio_value": money(row["cash"] + held),
            "long_market_value": money(held), "short_market_value": zero, "initial_margin": zero,
            "maintenance_margin": zero, "last_maintenance_margin": zero, "sma": zero, "accrued_fees": zero,
            "pending_transfer_in": zero, "pending_transfer_out": zero, "multiplier": "1", "daytrade_count": 0,
            "pattern_day_trader": False, "trading_blocked": False, "transfers_blocked": False,
            "account_blocked": False, "trade_suspended_by_user": False, "shorting_enabled": False,
            "created_at": row["created_at"],
        }

    def positions(self) -> list[dict[str, Any]]:
        self.catch_up()
        feed = self.feed.current()
        last, previous = self._prices(feed)
        return [position_json(s, p["qty"], p["cost_basis"], last[feed.column(s)], previous[feed.column(s)])
                for s, p in self.ledger.positions().items()]

    def position(self, symbol: str) -> dict[str, Any]:
        found = [p for p in self.positions() if p["symbol"] == symbol.upper()]
        if not found:
            raise BrokerError(404, "position does not exist")
        return found[0]

    # --- orders ----------------------------------------------------------------------------
    def submit(self, body: Any) -> dict[str, Any]:
        """Accept, fill or refuse an order request (one transaction).

        The order is inserted first, so the ledger's unique ``client_order_id`` decides a resent
        order before anything else: a restarted loop's resend is answered 422 (duplicate id),
        never 403 for the shares or cash its own first copy holds (docs/delivery.md, The trading
        loop). A later refusal rolls the insert back with the rest of the transaction.
        """
        self.catch_up()
        feed = self.feed.current()
        request = parse_order(body, feed.symbols)
        with self.ledger.tx() as db:
            bar, phase = self._position(feed)
            session = self.mode == "simulated" and phase == "open"
            between = feed.intraday and phase == "close" and not feed.closes_session(bar, self.calendar)
            at = self.now()
            order = {"id": str(uuid.uuid4()), "client_order_id": request.client_order_id, "symbol": request.symbol,
                     "side": request.side, "type": request.type, "time_in_force": request.time_in_force,
                     "qty": request.qty, "limit_price": request.limit_price,
                     "status": "new" if session or (self._view().is_open and not feed.intraday) else "accepted",
                     "created_at": at,
                     "updated_at": at, "submitted_at": at}
            try:
                Ledger.insert_order(db, order)
            except sqlite3.IntegrityError:
                raise BrokerError(422, "client_order_id must be unique", 40010001) from None
            if request.time_in_force == "opg" and (session or between):
                raise BrokerError(422, "opg orders are accepted only while the market is closed")
            last, _ = self._prices(feed)
            immediate = session and request.time_in_force != "cls" and feed.trades(bar, request.symbol)
            self._check_funds(db, feed, request, last, immediate, order["id"])
            pending = {**order, "filled_qty": 0}
            if immediate and marketable(pending, feed.open[bar, feed.column(request.symbol)]):
                cash, cost_pct = db.execute("SELECT cash, cost_pct FROM account").fetchone()
                fill_batch(db, [pending], feed.symbols, feed.open[bar], cash, cost_pct, feed.day(bar).isoformat(), at)
            row = dict(db.execute("SELECT * FROM orders WHERE id = ?", (order["id"],)).fetchone())
        return order_json(row)

    def _check_funds(self, db: sqlite3.Connection, feed: Feed, request: OrderRequest, last: np.ndarray,
                     immediate: bool, order_id: str) -> None:
        """403 for a sell beyond the shares not already held for other sells, for an immediate buy
        beyond the cash, or for a queued buy when the account has no buying power at all.
        ``order_id``: the request's own order, already inserted, which holds nothing against itself."""
        pending = [dict(r) for r in db.execute(
            f"SELECT * FROM orders WHERE status IN {OPEN_STATUSES} AND side = 'sell' AND id != ?",
            (order_id,)).fetchall()]
        cash, cost_pct = db.execute("SELECT cash, cost_pct FROM account").fetchone()
        if request.side == "sell":
            row = db.execute("SELECT qty FROM positions WHERE symbol = ?", (request.symbol,)).fetchone()
            available = (row["qty"] if row else 0) - sum(remaining(o) for o in pending
                                                         if o["symbol"] == request.symbol)
            if request.qty > available:
                raise BrokerError(403, f"insufficient qty available for order (requested: {request.qty}, "
                                       f"available: {available})")
            return
        price = request.limit_price or last[feed.column(request.symbol)]
        if immediate and request.qty * price * (1 + cost_pct) > cash:
            raise BrokerError(403, f"insufficient buying power (cash {cash:.2f}, order costs "
                                   f"{request.qty * price * (1 + cost_pct):.2f})")
        proceeds = sum(remaining(o) * last[feed.column(o["symbol"])] * (1 - cost_pct) for o in pending)
        if cash + proceeds <= 0:
            raise BrokerError(403, "insufficient buying power (no cash, and no sells queued)")

    def order(self, order_id: str) -> dict[str, Any]:
        try:
            uuid.UUID(order_id)
        except ValueError:
            raise BrokerError(422, f"order id must be a UUID (got {order_id[:40]!r})") from None
        self.catch_up()
        row = self.ledger.order("id", order_id)
        if row is None:
            raise BrokerError(404, "order not found")
        return order_json(row)

    def order_by_client_id(self, client_id: str) -> dict[str, Any]:
        self.catch_up()
        row = self.ledger.order("client_order_id", client_id)
        if row is None:
            raise BrokerError(404, "order not found")
        return order_json(row)

    def orders(self, status: str = "open", limit: int = 50, after: str | None = None, until: str | None = None,
               direction: str = "desc", symbols: list[str] | None = None) -> list[dict[str, Any]]:
        """Alpaca's order list: ``status`` open, closed or all; submitted between ``after`` and ``until``."""
        self.catch_up()
        where, args = [], []
        if status != "all":
            where.append(f"status {'' if status == 'open' else 'NOT '}IN {OPEN_STATUSES}")
        for bound, op in ((after, ">"), (until, "<")):
            if bound is not None:
                where.append(f"submitted_at {op} ?")
                args.append(bound)
        if symbols:
            where.append(f"symbol IN ({', '.join('?' * len(symbols))})")
            args.extend(symbols)
        order = "ASC" if direction == "asc" else "DESC"
        sql = (f"SELECT * FROM orders {'WHERE ' + ' AND '.join(where) if where else ''} "
               f"ORDER BY submitted_at {order}, seq {order} LIMIT ?")
        return [order_json(r) for r in self.ledger.rows(sql, (*args, limit))]

    def cancel(self, order_id: str) -> None:
        current = self.order(order_id)
        at = self.now()
        with self.ledger.tx() as db:
            status = db.execute("SELECT status FROM orders WHERE id = ?", (order_id,)).fetchone()["status"]
            if status not in OPEN_STATUSES:
                raise BrokerError(422, f"order is already {status}", 42210000)
            Ledger.update_order(db, current["id"], status="canceled", canceled_at=at, updated_at=at)

    def cancel_all(self) -> list[dict[str, Any]]:
        self.catch_up()
        at = self.now()
        with self.ledger.tx() as db:
            open_orders = self.ledger.open_orders(db)
            for order in open_orders:
                Ledger.update_order(db, order["id"], status="canceled", canceled_at=at, updated_at=at)
        return [{"id": o["id"], "status": 200} for o in open_orders]

    def close_position(self, symbol: str, qty: str | None = None, percentage: str | None = None) -> dict[str, Any]:
        """A market sell of the whole position, of ``qty`` shares, or of ``percentage`` percent (rounded down)."""
        held = int(self.position(symbol)["qty"])
        if qty is not None and percentage is not None:
            raise BrokerError(422, "qty and percentage cannot both be set")
        amount, given = held, qty if qty is not None else percentage
        if given is not None:
            try:
                share = float(given)
            except ValueError:
                raise BrokerError(422, "qty and percentage must be numbers") from None
            if not math.isfinite(share) or share < 0 or (percentage is not None and share > 100):
                raise BrokerError(422, "qty must be a finite number >= 0, percentage one in 0..100")
            amount = int(share) if qty is not None else int(held * share / 100.0)
        if amount <= 0:
            raise BrokerError(422, "nothing to close: the quantity rounds to 0 shares")
        return self.submit({"symbol": symbol.upper(), "qty": amount, "side": "sell", "type": "market",
                            "time_in_force": "day"})

    def close_all(self, cancel_orders: bool) -> list[dict[str, Any]]:
        if cancel_orders:
            self.cancel_all()
        out = []
        for position in self.positions():
            try:
                out.append({"symbol": position["symbol"], "status": 200,
                            "body": self.close_position(position["symbol"])})
            except BrokerError as err:
                out.append({"symbol": position["symbol"], "status": err.status,
                            "body": {"code": err.code, "message": err.message, "symbol": position["symbol"]}})
        return out
