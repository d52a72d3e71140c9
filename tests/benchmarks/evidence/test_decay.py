"""The decay benchmark's comparison monitor: the one-sided normal-mixture confidence sequence."""

from __future__ import annotations

import numpy as np

from benchmarks.evidence.decay import mixture_alarm


def test_the_mixture_boundary_is_crossed_where_the_hand_computed_one_is():
    """α 0.05 tightest at 100 bars: ρ = 100 / (2 ln 10 + ln(1 + 2 ln 10)) = 15.8006, and the
    boundary √(2 (t + ρ) ln(√((t + ρ)/ρ) / 0.1 + 1)) is 11.634 at t = 10 and 11.897 at t = 11."""
    assert mixture_alarm(np.full(40, -1.2), 1.0, 0.05, 100.0) == 9  # 12.0 ≥ 11.634 at the 10th bar
    assert mixture_alarm(np.full(40, -1.1), 1.0, 0.05, 100.0) == 10  # 11.0 < 11.634; then 12.1 ≥ 11.897
    assert mixture_alarm(np.full(40, -2.2), 2.0, 0.05, 100.0) == 10  # the spread scales the shortfall


def test_the_mixture_monitor_needs_ten_bars_and_never_fires_on_a_record_above_buy_and_hold():
    assert mixture_alarm(np.full(40, -5.0), 1.0, 0.05, 100.0) == 9  # crossed from the 2nd bar; called at the 10th
    assert mixture_alarm(np.full(400, 0.1), 1.0, 0.05, 100.0) is None
