"""The evidence report's arithmetic (benchmarks/results.py): paired differences and t statistics."""

import math
import statistics

from benchmarks.results import ARMS, Row, paired, report


def rows(evolution: list[float], vanilla: list[float], market: str = "learnable") -> list[Row]:
    out = []
    for seed, (e, v) in enumerate(zip(evolution, vanilla)):
        for arm, sharpe in zip(ARMS, (e, v, v, 0.5)):
            out.append(Row(market, seed, arm, sharpe, sharpe / 10, math.nan, 100, 1.0))
    return out


def test_paired_difference_and_t_statistic():
    evolution, vanilla = [1.0, 1.4, 0.9, 1.2, 1.1], [0.8, 1.0, 1.0, 0.7, 0.9]
    diffs = [e - v for e, v in zip(evolution, vanilla)]
    t = statistics.fmean(diffs) / (statistics.stdev(diffs) / math.sqrt(5))
    text = paired(rows(evolution, vanilla), "learnable", "evolution", "vanilla", "sharpe")
    assert text == f"{statistics.fmean(diffs):+.2f} ± {statistics.stdev(diffs):.2f} (t = {t:+.2f})"


def test_pairs_stay_within_their_market():
    mixed = rows([1.0, 2.0], [0.0, 1.0]) + rows([5.0], [5.0], market="null")
    assert paired(mixed, "null", "evolution", "vanilla", "sharpe") == "+0.00"
    assert paired(mixed, "learnable", "evolution", "vanilla", "sharpe").startswith("+1.00 ± 0.00")


def test_report_lists_every_arm_of_every_market():
    text = report(rows([1.0, 1.2], [0.5, 0.7]) + rows([0.1, -0.1], [0.0, 0.2], market="null"), "cmd", 3.0)
    for market in ("learnable", "null"):
        for arm in ARMS:
            assert f"| {market} | {arm} |" in text
    assert text.index("| learnable |") < text.index("| null |")
