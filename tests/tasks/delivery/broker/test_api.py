"""The local paper broker refuses malformed requests and keyless callers, in JSON, changing nothing."""

from __future__ import annotations

import json
import uuid
from typing import Any

import requests
from fastapi.routing import APIRoute

from tasks.delivery.broker.accounts import Exchange
from tasks.delivery.broker.api import create_app
from tests.tasks.delivery.broker.books import assert_error_json, hold, order_body, read, snapshot
from tests.tasks.delivery.broker.market import KEYS, market


def bad_requests(filled_id: str, filled_cid: str, canceled_cid: str
                 ) -> list[tuple[str, str, str, dict[str, Any], int | None, int | None]]:
    """(name, method, path, request kwargs, expected status or None for any 4xx, expected code or None)."""
    good = order_body("AAA", 1.0)
    unknown = str(uuid.uuid4())
    return [
        ("negative qty", "POST", "/v2/orders", {"json": order_body("AAA", -5.0)}, 422, 40010001),
        ("zero qty", "POST", "/v2/orders", {"json": order_body("AAA", 0.0)}, 422, 40010001),
        ("fractional qty", "POST", "/v2/orders", {"json": order_body("AAA", 1.5)}, 422, 40010001),
        ("qty and notional", "POST", "/v2/orders", {"json": order_body("AAA", 1.0, notional=10.0)}, 422, 40010001),
        ("notional alone", "POST", "/v2/orders", {"json": {**order_body("AAA", None), "notional": 10.0}}, 422,
         40010001),
        ("qty missing", "POST", "/v2/orders", {"json": {k: v for k, v in good.items() if k != "qty"}}, 422, 40010001),
        ("qty NaN", "POST", "/v2/orders", {"data": json.dumps(order_body("AAA", float("nan"))),
                                           "headers": {"Content-Type": "application/json"}}, 422, 40010001),
        ("qty a word", "POST", "/v2/orders", {"json": order_body("AAA", "ten")}, 422, 40010001),
        ("qty a boolean", "POST", "/v2/orders", {"json": order_body("AAA", True)}, 422, 40010001),
        ("qty too large", "POST", "/v2/orders", {"json": order_body("AAA", 1e12)}, 422, 40010001),
        ("qty a 400-digit integer", "POST", "/v2/orders",
         {"data": b'{"symbol": "AAA", "qty": 1' + b"0" * 400 + b', "side": "buy", "type": "market", '
                  b'"time_in_force": "day"}', "headers": {"Content-Type": "application/json"}}, 422, 40010001),
        ("limit_price a 400-digit integer", "POST", "/v2/orders",
         {"data": b'{"symbol": "AAA", "qty": 1, "side": "buy", "type": "limit", "limit_price": 1' + b"0" * 400
                  + b', "time_in_force": "day"}', "headers": {"Content-Type": "application/json"}}, 422, 40010001),
        ("unknown time_in_force", "POST", "/v2/orders", {"json": {**good, "time_in_force": "forever"}}, 422, 40010001),
        ("unknown type", "POST", "/v2/orders", {"json": {**good, "type": "bogus"}}, 422, 40010001),
        ("unknown side", "POST", "/v2/orders", {"json": {**good, "side": "short"}}, 422, 40010001),
        ("side missing", "POST", "/v2/orders", {"json": {k: v for k, v in good.items() if k != "side"}}, 422, 40010001),
        ("limit without limit_price", "POST", "/v2/orders", {"json": {**good, "type": "limit"}}, 422, 40010001),
        ("limit with a negative price", "POST", "/v2/orders", {"json": {**good, "type": "limit", "limit_price": -1}},
         422, 40010001),
        ("market with a limit_price", "POST", "/v2/orders", {"json": {**good, "limit_price": 10.0}}, 422, 40010001),
        ("stop order", "POST", "/v2/orders", {"json": {**good, "type": "limit", "limit_price": 9.0, "stop_price": 8.0}},
         422, 40010001),
        ("bracket order", "POST", "/v2/orders", {"json": {**good, "order_class": "bracket"}}, 422, 40010001),
        ("unknown symbol", "POST", "/v2/orders", {"json": order_body("ZZZZ", 1.0)}, 422, 40010001),
        ("symbol missing", "POST", "/v2/orders", {"json": {k: v for k, v in good.items() if k != "symbol"}}, 422,
         40010001),
        ("extended hours", "POST", "/v2/orders", {"json": {**good, "extended_hours": True}}, 422, 40010001),
        ("client_order_id of 129 characters", "POST", "/v2/orders", {"json": {**good, "client_order_id": "c" * 129}},
         422, 40010001),
        ("client_order_id with a space", "POST", "/v2/orders", {"json": {**good, "client_order_id": "a b"}}, 422,
         40010001),
        ("client_order_id reused", "POST", "/v2/orders", {"json": {**good, "client_order_id": filled_cid}}, 422,
         40010001),
        ("client_order_id of a canceled order reused", "POST", "/v2/orders",
         {"json": {**good, "client_order_id": canceled_cid}}, 422, 40010001),
        ("sell more than held", "POST", "/v2/orders", {"json": order_body("AAA", 11.0, "sell")}, 403, 40310000),
        ("sell what is not held", "POST", "/v2/orders", {"json": order_body("BBB", 1.0, "sell")}, 403, 40310000),
        ("body not JSON", "POST", "/v2/orders", {"data": b"{symbol: AAA, qty: 1",
                                                 "headers": {"Content-Type": "application/json"}}, 422, 40010001),
        ("body JSON null", "POST", "/v2/orders", {"data": b"null", "headers": {"Content-Type": "application/json"}},
         422, 40010001),
        ("body a JSON array", "POST", "/v2/orders", {"json": [good]}, 422, 40010001),
        ("body over 64 KiB (a valid order padded)", "POST", "/v2/orders", {"json": {**good, "pad": "x" * 70_000}},
         413, None),
        ("GET order by a non-UUID id", "GET", "/v2/orders/not-a-uuid", {}, 422, None),
        ("DELETE order by a non-UUID id", "DELETE", "/v2/orders/not-a-uuid", {}, 422, None),
        ("GET unknown order", "GET", f"/v2/orders/{unknown}", {}, 404, 40410000),
        ("DELETE unknown order", "DELETE", f"/v2/orders/{unknown}", {}, 404, 40410000),
        ("cancel a filled order", "DELETE", f"/v2/orders/{filled_id}", {}, 422, None),
        ("unknown client order id", "GET", "/v2/orders:by_client_order_id", {"params": {"client_order_id": "nope"}},
         404, 40410000),
        ("by client order id without one", "GET", "/v2/orders:by_client_order_id", {}, 422, None),
        ("orders with a bad status", "GET", "/v2/orders", {"params": {"status": "pending"}}, 422, None),
        ("orders with limit 0", "GET", "/v2/orders", {"params": {"limit": 0}}, 422, None),
        ("orders with limit 501", "GET", "/v2/orders", {"params": {"limit": 501}}, 422, None),
        ("orders with limit a word", "GET", "/v2/orders", {"params": {"limit": "many"}}, 422, None),
        ("orders with a bad direction", "GET", "/v2/orders", {"params": {"direction": "sideways"}}, 422, None),
        ("orders with a bad after date", "GET", "/v2/orders", {"params": {"after": "yesterday"}}, 422, None),
        ("orders with a bad until date", "GET", "/v2/orders", {"params": {"until": "2023-13-45"}}, 422, None),
        ("calendar with start after end", "GET", "/v2/calendar",
         {"params": {"start": "2023-07-10", "end": "2023-07-01"}}, 422, None),
        ("calendar with a bad date", "GET", "/v2/calendar", {"params": {"start": "July"}}, 422, None),
        ("calendar ending in the year 9999", "GET", "/v2/calendar", {"params": {"start": "2023-07-01",
                                                                                "end": "9999-12-31"}}, 422, None),
        ("calendar starting in the year 1", "GET", "/v2/calendar", {"params": {"start": "0001-01-01",
                                                                               "end": "2023-07-01"}}, 422, None),
        ("position not held", "GET", "/v2/positions/BBB", {}, 404, 40410000),
        ("close a position not held", "DELETE", "/v2/positions/BBB", {}, 404, 40410000),
        ("close a position of an unknown symbol", "DELETE", "/v2/positions/ZZZZ", {}, 404, 40410000),
        ("close with qty and percentage", "DELETE", "/v2/positions/AAA", {"params": {"qty": 1, "percentage": 50}},
         422, None),
        ("close a negative qty", "DELETE", "/v2/positions/AAA", {"params": {"qty": -3}}, 422, None),
        ("close a qty that is a word", "DELETE", "/v2/positions/AAA", {"params": {"qty": "all"}}, 422, None),
        ("close an infinite qty", "DELETE", "/v2/positions/AAA", {"params": {"qty": "inf"}}, 422, None),
        ("close an overflowing percentage", "DELETE", "/v2/positions/AAA", {"params": {"percentage": "1e999"}},
         422, None),
        ("close more than held", "DELETE", "/v2/positions/AAA", {"params": {"qty": 11}}, 403, 40310000),
        ("unknown asset", "GET", "/v2/assets/ZZZZ", {}, 404, None),
        ("advance the clock to nowhere", "POST", "/podracer/v1/clock/advance", {"params": {"to": "later"}}, 422, None),
        ("unknown endpoint", "GET", "/v2/watchlists", {}, 404, None),
        ("wrong method", "PATCH", "/v2/account", {}, 405, None),
    ]


NAMES_THE_PROBLEM = {
    "negative qty": "qty", "zero qty": "qty", "fractional qty": "fractional", "qty and notional": "notional",
    "notional alone": "notional", "qty missing": "qty", "qty NaN": "qty", "qty a word": "qty", "qty a boolean": "qty",
    "qty too large": "qty", "qty a 400-digit integer": "qty must be finite",
    "limit_price a 400-digit integer": "limit_price must be finite",
    "unknown time_in_force": "time_in_force", "unknown type": "type", "unknown side": "side",
    "side missing": "side", "limit without limit_price": "limit_price", "limit with a negative price": "limit_price",
    "market with a limit_price": "limit_price", "unknown symbol": "ZZZZ", "symbol missing": "symbol",
    "extended hours": "extended", "client_order_id of 129 characters": "client_order_id",
    "client_order_id with a space": "client_order_id", "client_order_id reused": "unique",
    "client_order_id of a canceled order reused": "unique",
}
"""Words the error message must contain: a request refused for the wrong reason (say, a negative
qty passed on to the ledger's CHECK constraint) would otherwise look refused all the same."""


def filled_position(m: Any) -> dict[str, Any]:
    """Buy 10 AAA, fill it at the open and stand at that session's close; the filled order's row."""
    hold(m, {"AAA": 10})
    (row,) = read(m.broker.ledger.path, "SELECT * FROM orders")
    assert row["status"] == "filled"
    return row


def test_malformed_requests_get_a_json_4xx_and_change_nothing(tmp_path):
    """Each of 65 malformed or refused requests (bad qty, side, type, time in force, prices,
    symbols, ids, bodies, list parameters, dates; a filled order canceled; a position not held
    closed) is answered with a 4xx whose body is ``{"code": int, "message": str}`` and leaves
    every table of the ledger exactly as it was."""
    with market(tmp_path) as m:
        db = m.broker.ledger.path
        filled = filled_position(m)
        canceled = m.raw("POST", "/v2/orders", json=order_body("AAA", 1.0, client_order_id="canceled-order")).json()
        assert m.raw("DELETE", f"/v2/orders/{canceled['id']}").status_code == 204
        cases = bad_requests(filled["id"], filled["client_order_id"], "canceled-order")
        assert len(cases) >= 20
        for name, method, path, kwargs, status, code in cases:
            before = snapshot(db)
            response = m.raw(method, path, **kwargs)
            try:
                assert_error_json(response, status, code)
                assert NAMES_THE_PROBLEM.get(name, "") in response.json()["message"]
            except (AssertionError, ValueError) as err:
                raise AssertionError(f"{name}: {err}") from None
            assert snapshot(db) == before, f"{name} changed the ledger"


def route_calls(app: Any, order_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    """Every (method, path, request kwargs) the app routes, path parameters filled with values
    that exist and bodies that are valid, so that a call that got through would do something."""
    values = {"symbol": "AAA", "order_id": order_id}
    extra: dict[tuple[str, str], dict[str, Any]] = {
        ("POST", "/v2/orders"): {"json": order_body("AAA", 1.0)},
        ("GET", "/v2/orders:by_client_order_id"): {"params": {"client_order_id": "open-order"}},
        ("POST", "/podracer/v1/clock/advance"): {"params": {"to": "next"}},
        ("DELETE", "/v2/positions"): {"params": {"cancel_orders": "True"}},
    }
    calls = []
    for route in app.routes:
        if not isinstance(route, APIRoute):
            continue
        for method in sorted(route.methods):
            calls.append((method, route.path.format(**values), extra.get((method, route.path), {})))
    return calls


def test_no_endpoint_answers_without_valid_keys(tmp_path):
    """Every route of the app, called with no key headers, with a wrong secret or with a wrong key
    id, is answered 401 ``40110000`` in JSON and changes nothing; with the right keys the same
    calls get through (so the 401s are the keys' doing, not the requests')."""
    with market(tmp_path) as m:
        db = m.broker.ledger.path
        filled_position(m)
        response = m.raw("POST", "/v2/orders", json=order_body("AAA", 1.0, client_order_id="open-order"))
        assert response.status_code == 200
        calls = route_calls(create_app(Exchange(m.broker, KEYS)), response.json()["id"])
        assert len(calls) >= 16 and ("POST", "/v2/orders") in {(method, path) for method, path, _ in calls}
        wrong = {
            "no keys": {},
            "wrong secret": {"APCA-API-KEY-ID": KEYS.key_id, "APCA-API-SECRET-KEY": KEYS.secret[:-1] + "X"},
            "wrong key id": {"APCA-API-KEY-ID": "PK" + KEYS.key_id[2:][::-1], "APCA-API-SECRET-KEY": KEYS.secret},
            "keys swapped": {"APCA-API-KEY-ID": KEYS.secret, "APCA-API-SECRET-KEY": KEYS.key_id},
        }
        before = snapshot(db)
        for method, path, kwargs in [*calls, ("GET", "/v2/no-such-endpoint", {})]:
            for name, headers in wrong.items():
                response = requests.request(method, m.url + path, headers=headers, timeout=30, **kwargs)
                try:
                    assert_error_json(response, 401, 40110000)
                except (AssertionError, ValueError) as err:
                    raise AssertionError(f"{method} {path} with {name}: {err}") from None
        assert snapshot(db) == before, "a call without valid keys changed the ledger"
        for method, path, kwargs in calls:  # the control: the same calls with the keys are not refused
            assert m.raw(method, path, **kwargs).status_code != 401, f"{method} {path}"
