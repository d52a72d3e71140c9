"""The trading loop: a registry alias's model trades a bar through alpaca-py, on either broker.

One cycle (``podracer trade``; the pipeline's deliver stage is one cycle):

1. resolve ``models:/<name>@<alias>`` afresh, and load the new version when the alias moved;
2. read the account and positions from the broker, never from memory (reconciliation);
3. build the state with the training env's ``build_state`` and take the pyfunc's orders;
4. run the pre-trade risk checks (:mod:`tasks.delivery.client.risk`);
5. journal the planned orders, then submit them with deterministic client order ids
   (account role, model version, bar, symbol), so a loop killed and restarted resubmits nothing;
   a bar is named by its date, or by its minute on minute bars (:mod:`tasks.delivery.client.bar_keys`);
6. poll for the fills, and record the cycle (orders, fills, equity, model version) in
   the journal and as metrics of the trading session's MLflow run.

The broker is reached through alpaca-py only, so the same loop trades on the local broker
and on Alpaca (docs/delivery.md). The alias is the champion's, or the shadow's in an account
of its own (docs/delivery.md, Shadow accounts): one loop, two instances.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
from alpaca.common.exceptions import APIError
from alpaca.trading.client import TradingClient
from alpaca.trading.enums import OrderSide, TimeInForce
from alpaca.trading.requests import GetOrdersRequest, MarketOrderRequest

from tasks.config import Params
from tasks.data import feature_set
from tasks.delivery.client.bar_keys import bar_close, bar_key, bar_step, bar_time, compact
from tasks.delivery.client.journal import Journal
from tasks.delivery.client.risk import PlannedOrder, check_orders, daily_loss, halt, halted
from tasks.errors import ConfigError, DataError, PodracerError
from tasks.registry.aliases import CHAMPION, alias_version
from tasks.registry.serving import policy_input

log = logging.getLogger("podracer.trade")
NEW_YORK = ZoneInfo("America/New_York")
"""The exchange's time zone: a bar's date is its New York session date."""
PENDING = ("new", "partially_filled", "pending_new", "accepted_for_bidding")
"""Statuses worth polling for: the order may fill in this session (``accepted`` waits for the next open)."""


class NoVersion(PodracerError):
    """No model version carries the alias a loop trades."""


class NoChampion(NoVersion):
    """No model version carries the ``champion`` alias yet."""


def id_prefix(role: str) -> str:
    """The start of a role's client order ids: ``pdr-`` for the champion (as before there were
    shadows), ``pdr-shadow-`` for the shadow, so no id is ever the same in both accounts."""
    return "pdr-" if role == CHAMPION else f"pdr-{role}-"


def client_order_id(version: str, bar: str, symbol: str, role: str = CHAMPION) -> str:
    """Deterministic: the same role, model version, bar and symbol always give the same id
    (``pdr-v3-20231025-SYM`` for a daily bar, ``pdr-v3-202310251330-SYM`` for a minute bar)."""
    return f"{id_prefix(role)}v{version}-{compact(bar)}-{symbol}"


@dataclass
class CycleResult:
    """What one cycle did: the record the journal and the run summary show."""

    bar: str
    version: str
    model_uri: str
    role: str = CHAMPION
    """The alias that traded, and so the account it traded in."""
    orders: list[dict[str, Any]] = field(default_factory=list)
    blocked: list[dict[str, Any]] = field(default_factory=list)
    flagged: list[dict[str, Any]] = field(default_factory=list)
    """Orders a risk check would have blocked, sent anyway because the loop only shadows its checks (a replay)."""
    cash: float = 0.0
    equity: float = 0.0
    halted: str | None = None
    swapped_from: str | None = None
    resumed: bool = False
    decided: bool = True
    """False on a bar between two decisions (``env.decide_every``): only the gate and close-outs traded."""
    shadow: CycleResult | None = None
    """The shadow's cycle on the same bar, in its own account, when one traded beside the champion."""

    def body(self) -> dict[str, Any]:
        return {"model_uri": self.model_uri, "orders": self.orders, "blocked": self.blocked, "flagged": self.flagged,
                "cash": self.cash, "equity": self.equity, "halted": self.halted, "decided": self.decided}


class Policy:
    """The pyfunc of the version carrying ``alias``, resolved on every call and reloaded only
    when the alias has moved; ``pinned``, the version found on the first call, for good (a
    replay trades one version over its whole window, whatever the alias does meanwhile)."""

    def __init__(self, params: Params, alias: str = CHAMPION, pinned: bool = False) -> None:
        self.registry, self.alias, self.pinned = params.registry, alias, pinned
        self.version: str | None = None
        self.model: Any = None

    def current(self) -> tuple[str, Any, str | None]:
        """(version, model, the version it replaced or None)."""
        import mlflow

        if self.pinned and self.version is not None:
            return self.version, self.model, None
        version = alias_version(self.registry, self.alias)
        if version is None:
            missing = NoChampion if self.alias == CHAMPION else NoVersion
            raise missing(f"no version of {self.registry.model_name} has alias '{self.alias}' yet "
                          "(the gate refused every version); nothing delivered")
        swapped = None
        if version != self.version:
            swapped = self.version
            self.model = mlflow.pyfunc.load_model(f"models:/{self.registry.model_name}/{version}")
            if swapped is not None:
                log.info("%s moved from version %s to %s: trading with the new one", self.alias, swapped, version)
            self.version = version
        return version, self.model, swapped


def order_summary(order: Any) -> dict[str, Any]:
    price = order.filled_avg_price
    return {"id": str(order.id), "client_order_id": order.client_order_id, "symbol": order.symbol,
            "side": order.side.value, "qty": int(float(order.qty)), "status": order.status.value,
            "filled_qty": int(float(order.filled_qty or 0)), "filled_avg_price": float(price) if price else None}


class TradingLoop:
    """Cycles of the version carrying ``alias`` on one broker account (``client``, the alias's
    own: the champion's or the shadow's), journaled in ``journal``."""

    def __init__(self, params: Params, client: TradingClient, journal: Journal,
                 on_cycle: Callable[[CycleResult, int], None] | None = None, enforce_risk: bool = True,
                 alias: str = CHAMPION) -> None:
        """``enforce_risk=False`` only reports the risk checks: what they would block is recorded as
        ``flagged`` and sent anyway (a replay, whose job is to prove serving equals training)."""
        self.params, self.client, self.journal = params, client, journal
        self.enforce_risk = enforce_risk
        self.role = alias
        self.policy = Policy(params, alias)
        self.halt_folder = params.dirs.broker
        self.on_cycle = on_cycle

    # --- one cycle -------------------------------------------------------------------------
    def cycle(self, bar: int | None = None, after_submit: Callable[[], None] | None = None) -> CycleResult:
        """Trade bar ``bar`` of the feature set (default: the latest) with the alias's current version."""
        version, model, swapped = self.policy.current()
        meta = model.unwrap_python_model().meta
        fs = feature_set.load(self.params.dirs.features)
        if meta.symbols != fs.symbols or meta.feature_names != fs.feature_names:
            raise DataError(f"{self.role} version {version} trades {len(meta.symbols)} symbols with "
                            f"{meta.feature_names}; data/features has other symbols or indicators")
        if getattr(meta.env, "overnight", "carry") == "flatten":
            raise ConfigError(f"{self.role} version {version} was trained with env.overnight: flatten; the trading "
                              "loop carries positions overnight only (train with env.overnight: carry)")
        t = len(fs.timestamps) - 1 if bar is None else bar
        day = bar_key(fs.timestamps[t], meta.freq)
        self._check_not_ahead(day, meta.freq)
        uri = f"models:/{self.params.registry.model_name}/{version}"
        result = CycleResult(day, version, uri, self.role, swapped_from=swapped)
        done = {r["state"]: r for r in self.journal.cycles(day) if r["model_version"] == version}
        if "recorded" in done:
            log.info("bar %s already traded by %s version %s; nothing to do", day, self.role, version)
            return self._finish(result, done["recorded"]["body"], record=False)
        reason = halted(self.halt_folder, self.role) if self.enforce_risk else None
        account = None
        if reason is None and "planned" not in done:
            account = self.client.get_account()  # read once: the loss check and the decision see the same account
            reason = self._daily_loss(result, account)
        if reason is not None:
            result.halted = reason
            log.warning("%s trading halted: %s", self.role, reason)
            return self._finish(result, {}, record=True, state="halted")
        if "planned" in done:  # a killed cycle: send what it planned, nothing new
            orders = [PlannedOrder(**o) for o in done["planned"]["body"]["planned"]]
            result.blocked, result.resumed = done["planned"]["body"]["blocked"], True
            result.decided = done["planned"]["body"].get("decided", True)
        else:
            result.decided = self._due(fs, t, day, version, meta.env.decide_every)
            if not result.decided:
                log.info("bar %s: %s version %s holds its last decision (env.decide_every %d); only the gate "
                         "and close-outs trade", day, self.role, version, meta.env.decide_every)
            orders, checked = self._decide(model, meta, fs, t, day, version, account, result.decided)
            if self.enforce_risk:
                orders = [o for o in orders if o.client_order_id not in {b["client_order_id"] for b in checked}]
                result.blocked = checked
            else:
                result.flagged += checked
            self._replace_other_versions(day, version)
            self.journal.put({"bar": day, "model_version": version, "state": "planned",
                              "body": {"planned": [o.as_dict() for o in orders], "blocked": result.blocked,
                                       "decided": result.decided}})
        submitted = [self._submit(o) for o in orders]
        if after_submit is not None:
            after_submit()
        result.orders = self._wait(submitted)
        return self._finish(result, {}, record=True)

    def _check_not_ahead(self, day: str, freq: str) -> None:
        """Refuse a bar whose close the broker's clock has not reached: its orders would fill at
        an open that came before the prices the policy saw (look-ahead). A daily bar closes with
        its session, a minute bar a minute after its start."""
        clock = self.client.get_clock()
        closes = bar_close(day, freq)
        if closes is None:
            today, bar = clock.timestamp.astimezone(NEW_YORK).date(), date.fromisoformat(day)
            ahead = bar > today or (bar == today and (clock.is_open or
                                                      clock.next_open.astimezone(NEW_YORK).date() == bar))
        else:
            ahead = closes > clock.timestamp
        if ahead:
            raise DataError(f"bar {day} is after the broker's clock ({clock.timestamp.isoformat()}): trading it "
                            "would use prices from after the fills")

    def _daily_loss(self, result: CycleResult, account: Any) -> str | None:
        """Halt (and cancel the open orders) when the day's loss passes the limit; a loop that
        only reports its checks records the breach and trades on. The champion's halt stops
        every account (the kill switch); the shadow's stops the shadow only."""
        reason = daily_loss(float(account.equity), float(account.last_equity), self.params.trade.risk)
        if reason is None:
            return None
        if not self.enforce_risk:
            result.flagged.append({"reason": reason})
            return None
        halt(self.halt_folder, reason, self.role)
        self.client.cancel_orders()
        return reason

    def _due(self, fs: feature_set.FeatureSet, t: int, day: str, version: str, every: int) -> bool:
        """Whether bar ``t`` (named ``day``) is a decision bar of ``version`` under
        ``env.decide_every``: the first bar it trades, then every ``every``-th bar after the last
        one it decided on (the journal's record, found among the feature set's bars before
        ``t``), which is the env's schedule, so a replay of the backtest window decides on the
        bars the backtest did. Bars are counted as indices, so minute bars count across sessions
        as the env's window does."""
        if every == 1:
            return True
        before = fs.timestamps[:t]
        for key in self.journal.decided(version, day):
            at = int(np.searchsorted(before, bar_time(key)))
            if at < len(before) and before[at] == bar_time(key):
                return t - at >= every
        return True

    def _decide(self, model: Any, meta: Any, fs: feature_set.FeatureSet, t: int, day: str,
                version: str, account: Any, decide: bool = True) -> tuple[list[PlannedOrder], list[dict[str, Any]]]:
        """The policy's orders for bar ``t`` (sells first), and those a risk check objects to;
        on a held bar (``decide`` false), only the gate's and close-outs' orders.

        The feature set's tradable row goes with the state (docs/data.md): the champion never buys
        a symbol that is not tradable at bar t and sells a position in one that stopped
        trading. Its price there is the last real close, which the risk checks value it at."""
        held = {p.symbol: int(float(p.qty)) for p in self.client.get_all_positions()}
        shares = np.array([held.get(s, 0) for s in meta.symbols], dtype=np.float64)
        frame = policy_input(meta, fs.prices[t], fs.features[t], shares, float(account.cash), fs.tradable[t], decide)
        decision = model.predict(frame)
        wanted = [(str(s), int(q)) for s, q in zip(decision["symbol"], decision["order_qty"]) if int(q) != 0]
        orders = [PlannedOrder(s, "sell" if q < 0 else "buy", abs(q), client_order_id(version, day, s, self.role))
                  for s, q in sorted(wanted, key=lambda sq: sq[1] > 0)]  # sells first
        prices = dict(zip(fs.symbols, fs.prices[t].tolist()))
        return orders, check_orders(orders, prices, held, float(account.equity), self.params.trade.risk)[1]

    def _replace_other_versions(self, day: str, version: str) -> None:
        """A new version of the alias trading a bar replaces the open orders an earlier one placed for it."""
        ours = f"{id_prefix(self.role)}v"
        marker, mine = f"-{compact(day)}-", f"{ours}{version}-"
        for order in self.client.get_orders(GetOrdersRequest(status="open", limit=500)):
            cid = order.client_order_id
            if cid.startswith(ours) and marker in cid and not cid.startswith(mine):
                self.client.cancel_order_by_id(order.id)
                log.info("canceled %s: replaced by version %s's orders for %s", cid, version, day)

    def _submit(self, order: PlannedOrder) -> Any:
        request = MarketOrderRequest(symbol=order.symbol, qty=order.qty, side=OrderSide(order.side),
                                     time_in_force=TimeInForce.DAY, client_order_id=order.client_order_id)
        try:
            return self.client.submit_order(request)
        except APIError as err:
            if _status(err) == 422 and "client_order_id" in message(err):  # sent before a restart
                return self.client.get_order_by_client_id(order.client_order_id)
            log.warning("order %s refused: HTTP %s %s", order.client_order_id, _status(err), message(err))
            return {"client_order_id": order.client_order_id, "symbol": order.symbol, "side": order.side,
                    "qty": order.qty, "status": "refused", "reason": message(err)}

    def _wait(self, submitted: list[Any]) -> list[dict[str, Any]]:
        """Poll the cycle's orders (one list request a round) until none can still fill in this
        session, or the timeout; orders queued for the next open are not waited for."""
        deadline = time.monotonic() + self.params.trade.fill_timeout_seconds
        out = [s for s in submitted if isinstance(s, dict)]
        live = {o.client_order_id: o for o in submitted if not isinstance(o, dict)}
        while live:
            since = min(o.submitted_at for o in live.values()) - timedelta(seconds=1)
            listed = self.client.get_orders(GetOrdersRequest(status="all", after=since, limit=500, direction="asc"))
            live.update({o.client_order_id: o for o in listed if o.client_order_id in live})
            if not any(o.status.value in PENDING for o in live.values()) or time.monotonic() > deadline:
                break
            time.sleep(self.params.trade.poll_seconds)
        return out + [order_summary(o) for o in live.values()]

    def _finish(self, result: CycleResult, body: dict[str, Any], record: bool, state: str = "recorded") -> CycleResult:
        if body:
            result.orders, result.blocked, result.flagged = body["orders"], body["blocked"], body.get("flagged", [])
        account = self.client.get_account()
        result.cash, result.equity = float(account.cash), float(account.equity)
        if record:
            self.journal.put({"bar": result.bar, "model_version": result.version, "state": state,
                              "body": result.body()})
            if self.on_cycle is not None:
                self.on_cycle(result, bar_step(result.bar))
        for order in result.orders:
            log.info("%s %s %d %s: %s", order.get("client_order_id"), order.get("side"), order.get("qty"),
                     order.get("symbol"), order.get("status"))
        return result


def _status(err: APIError) -> int | None:
    return err.status_code


def message(err: APIError) -> str:
    try:
        return str(err.message)
    except (ValueError, KeyError, TypeError):
        return str(err)[:200]
