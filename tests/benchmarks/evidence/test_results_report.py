"""The evidence report's arithmetic and decisions (benchmarks/evidence/results_report.py): paired
differences, t statistics, the targets of docs/results.md and the gate's promotion count."""

import math
from pathlib import Path

from benchmarks.evidence.results_report import (
    OverlapError,
    critical_t,
    diffs,
    gate_rate,
    paired,
    plot_curve,
    report,
    t_stat,
    targets,
    write_report,
)


def rows(sharpes: dict[str, list[float]], market: str = "learnable") -> list[dict]:
    return [{"market": market, "seed": seed, "arm": arm, "sharpe": s, "cumulative_return": s / 10,
             "validation": math.nan, "env_steps": 100, "seconds": 1.0, "curve": []}
            for arm, values in sharpes.items() for seed, s in enumerate(values)]


def test_t_statistic_by_hand():
    assert math.isclose(t_stat([1.0, 2.0, 3.0]), 2 / (1 / math.sqrt(3)))  # mean 2, sd 1, n 3
    assert math.isnan(t_stat([1.0]))
    assert t_stat([-0.4, -0.4]) == -math.inf and math.isnan(t_stat([0.0, 0.0]))  # one market, every seed alike


def test_a_cell_without_a_t_says_why_instead_of_printing_nan():
    assert paired([1.0, 2.0, 3.0]) == "2.00 ± 1.00 (t = +3.46)"
    assert paired([0.5]) == "0.50 ± 0.00 (no t: one seed)"
    assert paired([0.0, 0.0]) == "0.00 ± 0.00 (no t: no difference on any seed)"
    assert paired([-0.4, -0.4]) == "-0.40 ± 0.00 (t = -inf)" and paired([]) == "-"


def test_differences_are_paired_by_seed_and_stay_in_their_market():
    mixed = (rows({"champion": [1.0, 2.0], "buy-and-hold": [0.5, 0.5]})
             + rows({"champion": [9.0], "buy-and-hold": [0.0]}, market="null"))
    assert diffs(mixed, "learnable", "champion", "buy-and-hold") == [0.5, 1.5]
    assert diffs(mixed, "null", "champion", "buy-and-hold") == [9.0]


def test_the_targets_decide_met_and_not_met_at_their_thresholds():
    # champion − ewm_40 rule: −0.10 on every seed (exactly the slack); champion − momentum: 0.25, 0.5, 0.75
    # (mean 0.5, t = 0.5 / (0.25 / √3) = 3.46); champion − vanilla: −0.25, 0, 0.25 (mean 0)
    base = {"buy-and-hold": [0.0] * 3, "vanilla": [0.5] * 3, "momentum": [0.0] * 3, "filter": [1.0] * 3}
    champion = [0.25, 0.5, 0.75]
    got = targets(rows({**base, "champion": champion, "ewm_40 rule": [0.35, 0.6, 0.85]}))
    assert [name.split(":")[1].split(",")[0].strip() for name, _, _ in got] == [
        "champion − B&H ≥ ewm_40 rule − B&H − 0.10", "champion − momentum > 0", "champion − vanilla > 0"]
    assert [ok for _, _, ok in got] == [True, True, False]
    assert got[1][1] == "+0.50, t = +3.46 (the filter: +1.00, t = +inf)"  # the ceiling's own reading beside it
    assert got[2][1].endswith("(the filter: +0.50, t = +inf)")
    trailing = targets(rows({**base, "champion": champion, "ewm_40 rule": [0.36, 0.61, 0.86]}))
    assert trailing[0][2] is False  # 0.11 behind the rule
    both = targets(rows({**base, "champion": champion, "ewm_40 rule": [0.35, 0.6, 0.85],
                         "sr_40 rule": [0.45, 0.7, 0.95]}))  # 0.20 behind the sr_40 rule
    assert [(name.split(":")[1].split(",")[0].strip(), ok) for name, _, ok in both[:2]] == [
        ("champion − B&H ≥ ewm_40 rule − B&H − 0.10", True), ("champion − B&H ≥ sr_40 rule − B&H − 0.10", False)]


def test_compute_buys_return_when_16x_beats_1x_or_reaches_the_filter():
    base = {"buy-and-hold": [0.0] * 3, "filter": [1.0] * 3, "champion": [0.4, 0.5, 0.6]}
    rising = targets(rows({**base, "champion 16x": [0.6, 0.8, 0.9]}))[-1]  # +0.2, +0.3, +0.3: t = 9.8
    assert rising[0].startswith("learnable: compute buys return") and rising[2] is True
    flat = targets(rows({**base, "champion 16x": [0.4, 0.6, 0.6]}))[-1]  # 0, +0.1, 0: t = 1; 0.47 below the filter
    assert flat[2] is False
    ceiling = targets(rows({**base, "filter": [0.6, 0.6, 0.6], "champion 16x": [0.4, 0.6, 0.6]}))[-1]
    assert ceiling[2] is True  # 16x − filter = −0.07: at the ceiling
    fewer = targets(rows({**base, "champion 4x": [0.6, 0.8, 0.9], "champion 16x": [0.4, 0.6, 0.6]}))[-1]
    assert fewer[1].startswith("16x − 1x +0.03") and fewer[2] is False  # the most compute decides, not any
    only4 = targets(rows({**base, "champion 4x": [0.6, 0.8, 0.9]}))[-1]
    assert only4[0].startswith("learnable: compute buys return: 4x − 1x") and only4[2] is True


def test_the_null_targets_fail_when_an_arm_beats_buy_and_hold_beyond_noise():
    calm = {"buy-and-hold": [0.0] * 4, "champion": [0.1, -0.1, 0.2, -0.2], "vanilla": [0.0, 0.1, -0.1, 0.05],
            "momentum": [0.3, -0.3, 0.1, -0.1]}
    for market in ("null", "martingale"):
        assert [ok for _, _, ok in targets(rows(calm, market=market))] == [True]
        leaky = {**calm, "champion": [0.5, 0.6, 0.55, 0.52]}
        assert [ok for _, _, ok in targets(rows(leaky, market=market))] == [False]
        costly = {**calm, "momentum": [-0.5, -0.6, -0.55, -0.52]}  # loses beyond noise: no edge, no leak
        assert [ok for _, _, ok in targets(rows(costly, market=market))] == [True]
        # an arm that is buy-and-hold on every seed has no t and no edge, wherever it is listed
        assert [ok for _, _, ok in targets(rows({**calm, "champion": [0.0] * 4}, market=market))] == [True]
        beaten = targets(rows({**calm, "champion": [0.0] * 4, "vanilla": [0.5, 0.6, 0.55, 0.52]}, market=market))
        assert [ok for _, _, ok in beaten] == [False]
    # one seed cannot show the absence of an edge, wherever its arm is listed: not met, and why
    one = targets(rows({"buy-and-hold": [0.0], "champion": [0.1], "vanilla": [-0.2]}, market="null"))
    assert [ok for _, _, ok in one] == [False] and one[0][1] == "champion no t: one seed, vanilla no t: one seed"


def test_a_one_seed_run_states_its_targets_without_a_t_and_meets_none_that_needs_one():
    got = targets(rows({"buy-and-hold": [0.0], "momentum": [0.0], "vanilla": [0.0], "filter": [1.0],
                        "ewm_40 rule": [0.5], "champion": [0.6], "champion 16x": [0.8]}))
    assert got[0][1] == "champion − rule +0.10 ± 0.00 (no t: one seed)" and got[0][2] is True
    assert got[1][1] == "+0.60, no t: one seed (the filter: +1.00, no t: one seed)" and got[1][2] is False
    assert got[-1][1].startswith("16x − 1x +0.20 ± 0.00 (no t: one seed, 1 seed)") and got[-1][2] is False


def test_report_lists_the_arms_and_counts_promotions():
    text = report([{"command": "cmd", "minutes": 1.0,
                    "rows": rows({"champion": [1.0, 0.2], "buy-and-hold": [0.5, 0.5], "momentum": [0.6, 0.6]})}])
    assert "| learnable | champion |" in text and "| learnable | momentum |" in text
    assert "| learnable | 1 of 2 | 1 of 2 | 1 of 2 | 1 of 2 | 0 of 2 |" in text  # +0.5 and −0.3: +0.5 is not above 0.5


def test_the_gate_table_counts_promotions_strictly_above_each_margin():
    # champion − B&H per seed (exact in binary): +0.0625, +0.25, +0.5, +1.0 (learnable); −0.25, +0.125 (null)
    table = gate_rate(rows({"champion": [0.5625, 0.75, 1.0, 1.5], "buy-and-hold": [0.5] * 4})
                      + rows({"champion": [0.25, 0.625], "buy-and-hold": [0.5, 0.5]}, market="null"), (0.0, 0.25, 0.5))
    assert "| learnable | 4 of 4 | 2 of 4 | 1 of 4 |" in table  # +0.25 is not above a margin of 0.25
    assert "| null | 1 of 2 | 0 of 2 | 0 of 2 |" in table


def test_a_champion_ahead_of_momentum_with_t_below_2_is_not_met():
    # champion − momentum: 0.1, 0.5, 0.9: mean 0.5, t = 0.5 / (0.4 / √3) = 2.17; 0.0, 0.5, 1.0: t = 1.73
    got = targets(rows({"buy-and-hold": [0.0] * 3, "momentum": [0.5] * 3, "champion": [0.6, 1.0, 1.4]}))
    assert got[0][2] is True and "t = +2.17" in got[0][1]
    got = targets(rows({"buy-and-hold": [0.0] * 3, "momentum": [0.5] * 3, "champion": [0.5, 1.0, 1.5]}))
    assert got[0][2] is False and "t = +1.73" in got[0][1]


def test_the_arm_table_shows_the_training_window_sharpe_and_a_dash_for_older_runs():
    old = rows({"champion": [1.0, 0.2], "buy-and-hold": [0.5, 0.5]})
    new = [{**r, "train_sharpe": {"champion": [2.0, 1.0], "buy-and-hold": [0.7, 0.3]}[r["arm"]][r["seed"]]}
           for r in old]
    assert "| learnable | champion | 0.60 ± 0.57 | 0.06 ± 0.06 | - | 1.50 ± 0.71 | 100 | 1 |" in report(
        [{"command": "cmd", "minutes": 1.0, "rows": new}])
    assert "| learnable | champion | 0.60 ± 0.57 | 0.06 ± 0.06 | - | - | 100 | 1 |" in report(
        [{"command": "cmd", "minutes": 1.0, "rows": old}])


def test_the_report_states_the_critical_t_of_its_own_seed_count():
    # Student's t 0.975 quantiles: 9 degrees of freedom 2.262, 7 of them 2.365, 1 of them 12.706
    assert (critical_t(10), critical_t(8), critical_t(2), critical_t(100)) == (2.26, 2.36, 12.71, 1.96)
    assert math.isnan(critical_t(1))  # one seed has no spread
    eight = report([{"command": "cmd", "minutes": 1.0,
                     "rows": rows({"champion": [1.0] * 8, "buy-and-hold": [0.5] * 8})}])
    assert "(7 degrees of freedom; |t| > 2.36 is significant at 5%, two-sided)" in eight


def test_the_evidence_heading_gives_the_runs_own_time_and_never_passes_a_merge_off_as_it(tmp_path):
    out = tmp_path / "results.md"
    out.write_text("# Results\n\nkept\n")
    run = {"command": "cmd", "minutes": 1.0, "rows": rows({"champion": [1.0, 0.2], "buy-and-hold": [0.5, 0.5]})}
    write_report([{**run, "finished": "2026-11-24 03:07 UTC"}], None, out)
    assert "## Evidence, measured 2026-11-24 03:07 UTC" in out.read_text() and "kept" in out.read_text()
    write_report([run], None, out)  # a run recorded before runs kept their time
    text = out.read_text()
    assert "## Evidence, tables written " in text and "Evidence, measured" not in text and text.count("kept") == 1


def test_a_run_recovered_from_its_log_says_its_wall_time_is_unknown_and_plots_env_steps_only(tmp_path):
    def champions(seconds: float) -> list[dict]:
        return [{**r, "curve": [[1, 100.0 * g, seconds * g, r["sharpe"] + g] for g in (1, 2)]}
                for r in rows({"champion": [1.0, 0.2], "momentum": [0.5, 0.4], "buy-and-hold": [0.5, 0.5]})]

    def width(png: Path) -> int:  # the PNG header's IHDR width, in pixels
        return int.from_bytes(png.read_bytes()[16:20], "big")

    path = tmp_path / "curve.png"
    plot_curve(champions(10.0), path)
    assert width(path) == 1000  # env steps and wall time, 5 inches each at 100 dpi
    plot_curve(champions(math.nan), path)
    assert width(path) == 500
    recovered = report([{"command": "cmd", "minutes": math.nan, "rows": champions(math.nan),
                         "recovered": "from its log"}])
    assert "wall time not recorded for every run" in recovered and "nan" not in recovered.split("\n")[0]
    assert "Recovered: `cmd`: from its log." in recovered
    assert "(seeds 0–1, 1 min on this machine)" in report([{"command": "cmd", "minutes": 1.0, "rows": champions(1.0)}])


def test_a_merge_of_two_runs_holding_the_same_seed_is_an_error_naming_both():
    first = {"command": "first", "minutes": 1.0, "rows": rows({"champion": [1.0, 0.2], "buy-and-hold": [0.5, 0.5]})}
    rerun = {"command": "rerun", "minutes": 1.0,
             "rows": [{**r, "seed": r["seed"] + 1} for r in rows({"champion": [0.2], "buy-and-hold": [0.5]})]}
    try:
        report([first, rerun])
    except OverlapError as err:
        assert str(err) == "learnable seed 1 champion is in two runs: `first` and `rerun`"
    else:
        raise AssertionError("the overlapping seed was merged")
    rest = {**rerun, "rows": [{**r, "seed": 2} for r in rerun["rows"]]}
    assert "(seeds 0–2, 2 min on this machine)" in report([first, rest])


def test_the_compute_plot_compares_its_arms_on_the_seeds_they_share(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    drawn = []
    monkeypatch.setattr(Figure, "savefig", lambda figure, path, **_: drawn.append(figure))
    from benchmarks.evidence.results_report import plot_compute

    both = rows({"buy-and-hold": [0.0] * 3, "champion": [0.5, 0.5, 3.5]})
    four = [r for r in rows({"champion 4x": [0.7, 0.7]})]  # seeds 0 and 1 only
    plot_compute(both + four, tmp_path / "compute.png")
    axes = drawn[0].axes[0]
    assert axes.get_title().endswith("2 seeds")
    assert list(axes.lines[0].get_ydata()) == [0.5, 0.7]  # seed 2's 3.5 is not in the 1x point
