"""The shadow's line in ``podracer status``, from its version's tags (docs/delivery.md, Shadow accounts)."""

from __future__ import annotations

from tasks.delivery.client.standing import Standing


def test_the_line_says_version_record_and_equity():
    since = {"shadow_since": "2024-03-28"}
    assert Standing("4", since, None).line() == "shadow version 4 (record after 2024-03-28): no record yet"
    record = {**since, "shadow_bars": "42", "shadow_sharpe_diff": "-0.1251", "shadow_p": "0.6180"}
    assert Standing("4", record, 101_234.5).line() == (
        "shadow version 4 (record after 2024-03-28): 42 bars of record, Sharpe difference -0.13, p 0.618; "
        "paper equity 101,234.50")
    assert Standing("4", {"shadow_bars": "3", "shadow_p": "n/a"}, None).line() == (
        "shadow version 4: 3 bars of record, Sharpe difference ?, p n/a")
