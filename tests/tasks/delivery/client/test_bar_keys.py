"""How the trading client names a bar, and when the live loop looks for the next one."""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace

import numpy as np

from tasks.delivery.client.bar_keys import bar_close, bar_key, bar_step, bar_time
from tasks.delivery.client.live import due
from tasks.delivery.client.loop import client_order_id

DAY = np.datetime64("2023-11-22T00:00:00.000000000")
MINUTE = np.datetime64("2023-11-22T20:59:00.000000000")  # 15:59 New York: the session's last minute


def test_a_daily_bar_keeps_its_date_and_a_minute_bar_is_named_by_its_minute_in_utc():
    assert bar_key(DAY, "1d") == "2023-11-22"
    assert client_order_id("3", "2023-11-22", "SYN000") == "pdr-v3-20231122-SYN000"
    assert bar_key(MINUTE, "1min") == "2023-11-22T20:59Z"
    assert client_order_id("3", "2023-11-22T20:59Z", "SYN000", "shadow") == "pdr-shadow-v3-202311222059-SYN000"
    assert bar_time("2023-11-22") == DAY and bar_time("2023-11-22T20:59Z") == MINUTE
    assert bar_step("2023-11-22") == 19683  # days since 1970, as the daily steps always were
    assert bar_step("2023-11-22T20:59Z") == 19683 * 1440 + 20 * 60 + 59
    assert bar_close("2023-11-22", "1d") is None
    assert bar_close("2023-11-22T20:59Z", "1min").isoformat() == "2023-11-22T21:00:00+00:00"
    assert sorted(["2023-11-22T20:59Z", "2023-11-22T14:30Z", "2023-11-20T20:59Z"]) == [
        "2023-11-20T20:59Z", "2023-11-22T14:30Z", "2023-11-22T20:59Z"]  # names sort as their bars


def test_the_live_loop_looks_for_the_next_minute_bar_a_minute_after_the_latest_closed():
    utc = timezone.utc
    market_open = SimpleNamespace(is_open=True, next_open=datetime(2023, 11, 24, 14, 30, tzinfo=utc),
                                  next_close=datetime(2023, 11, 22, 21, 0, tzinfo=utc))
    closed = SimpleNamespace(is_open=False, next_open=datetime(2023, 11, 24, 14, 30, tzinfo=utc),
                             next_close=datetime(2023, 11, 24, 18, 0, tzinfo=utc))
    assert due(market_open, "2023-11-22T15:00Z", "1min") == datetime(2023, 11, 22, 15, 2, tzinfo=utc)
    assert due(closed, "2023-11-22T20:59Z", "1min") == datetime(2023, 11, 24, 14, 31, tzinfo=utc)  # after Thanksgiving
    assert due(closed, "2023-11-22", "1d") == closed.next_close
