"""Order requests checked as Alpaca would (``alpaca_shapes.parse_order``): numbers past a float's range."""

from __future__ import annotations

import json

import pytest

from tasks.delivery.broker.alpaca_shapes import BrokerError, parse_order

SYMBOLS = ["AAA"]


def limit_order(**numbers: object) -> dict[str, object]:
    return {"symbol": "AAA", "qty": 1, "side": "buy", "type": "limit", "limit_price": 10.0, "time_in_force": "day",
            **numbers}


@pytest.mark.parametrize("key", ["qty", "limit_price"])
def test_a_number_past_a_floats_range_is_refused_as_not_finite_like_1e400(key):
    """JSON puts no bound on an integer's digits and Python reads a 400-digit one exactly, but a
    float cannot hold it (the largest is about 1.8e308). It gets the one-line 422 that the same
    number written ``1e400`` gets (read as infinity), never an OverflowError; an integer that a
    float holds (a qty of 10^308) meets the ordinary checks."""
    for huge in (json.loads("1" + "0" * 400), json.loads("1e400"), "1" + "0" * 400):
        with pytest.raises(BrokerError) as err:
            parse_order(limit_order(**{key: huge}), SYMBOLS)
        assert (err.value.status, err.value.code, err.value.message) == (422, 40010001, f"{key} must be finite")
    if key == "qty":
        with pytest.raises(BrokerError, match="qty must be at most 10,000,000"):
            parse_order(limit_order(qty=10**308), SYMBOLS)
