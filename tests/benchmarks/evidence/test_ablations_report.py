"""The ablations' report (benchmarks/evidence/ablations_report.py): each arm paired by seed with
its own reference, the ladder step by step, the rules and their blends against the learner's
start, and the selection bound against the vanilla agent."""

from benchmarks.evidence.ablations import AVERAGED, BOUND, PICKED
from benchmarks.evidence.ablations_report import report


def rows(arm: str, tests: list[float], train: float = 0.0) -> list[dict]:
    return [{"arm": arm, "seed": seed, "train": train, "val": 0.0, "test": t} for seed, t in enumerate(tests)]


def test_each_arm_is_paired_with_its_reference_by_seed_and_the_ladder_step_by_step():
    text = report(rows("shipped", [1.0, 2.0, 3.0]) + rows("no averaging", [0.0, 2.0, 3.0])
                  + rows(AVERAGED, [1.0, 1.0, 1.0]) + rows("joint credit", [0.0, 0.0, 4.0])
                  + rows("vanilla", [1.0, 2.0, 3.0]))
    lines = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if line.startswith("| ")}
    # no averaging − shipped: −1, 0, 0 → mean −0.33, sd 0.58, t = −0.33 / (0.58 / √3) = −1.00
    assert lines["no averaging"].endswith("| − shipped: -0.33 ± 0.58 (t = -1.00) |")
    # joint credit is a change of the averaged learner: −1, −1, +3 against it
    assert lines["joint credit"].endswith("| − + averaged policy: 0.33 ± 2.31 (t = +0.25) |")
    assert lines["vanilla"].endswith("| = shipped on every seed |")
    assert "- shipped − + averaged policy: 1.00 ± 1.00 (t = +1.73)" in text


def test_without_the_shipped_arm_the_shipped_runs_rows_pair_with_the_averaged_learner():
    text = report(rows(AVERAGED, [1.0, 1.0]) + rows("vanilla", [2.0, 3.0]))
    assert "| vanilla | +0.00 ± 0.00 | +0.00 ± 0.00 | +2.50 ± 0.71 | − + averaged policy: 1.50 ± 0.71 (t = +3.00) |" \
        in text


def test_the_rules_alone_pair_with_the_first_rule_and_print_no_ladder():
    # sr_40 − ewm_40: 0.2, 0.1, 0.3 (mean 0.2, sd 0.1, t = 0.2 / (0.1 / √3) = 3.46)
    text = report(rows("ewm_40 rule", [0.5, 0.7, 0.6]) + rows("sr_40 rule", [0.7, 0.8, 0.9]))
    assert ("| sr_40 rule | +0.00 ± 0.00 | +0.00 ± 0.00 | +0.80 ± 0.10 | − ewm_40 rule: 0.20 ± 0.10 (t = +3.46) |"
            in text)
    assert "ladder" not in text


def test_the_rule_best_on_validation_pairs_with_the_learners_start_and_counts_its_picks():
    # picked − sr_40 on test: 0.0, −0.3, +0.1 (mean −0.0667, sd 0.2082, t = −0.55)
    chosen = [dict(r, picked=name) for r, name in zip(rows(PICKED, [0.5, 0.4, 0.9]),
                                                       ("sr_40 rule", "ewm_20 rule", "ewm_40 rule"))]
    text = report(rows("ewm_40 rule", [0.6, 0.6, 0.9]) + rows("sr_40 rule", [0.5, 0.7, 0.8]) + chosen)
    assert f"| {PICKED} | +0.00 ± 0.00 | +0.00 ± 0.00 | +0.60 ± 0.26 | − sr_40 rule: -0.07 ± 0.21 (t = -0.55) |" in text
    assert ("The rule best on validation: ewm_40 rule on 1 of 3 seeds, sr_40 rule on 1 of 3 seeds, "
            "ewm_20 rule on 1 of 3 seeds.") in text


def test_blends_pair_with_the_learners_start_and_the_bound_with_the_vanilla_agent():
    # blend − sr_40 rule: −0.1, +0.1, +0.3 (mean 0.1, sd 0.2, t = 0.1 / (0.2 / √3) = 0.87)
    limits = [dict(r, spread=s) for r, s in zip(rows(BOUND, [0.9, 0.8, 1.0]), (0.1, 0.0, 0.2))]
    text = report(rows("shipped", [0.5, 0.5, 0.5]) + rows("vanilla", [0.6, 0.8, 0.7]) + limits
                  + rows("sr_40 rule", [0.6, 0.5, 0.4]) + rows("blend: the three rules", [0.5, 0.6, 0.7]))
    assert ("| blend: the three rules | +0.00 ± 0.00 | +0.00 ± 0.00 | +0.60 ± 0.10 "
            "| − sr_40 rule: 0.10 ± 0.20 (t = +0.87) |") in text
    # bound − vanilla: 0.3, 0.0, 0.3 (mean 0.2, sd 0.1732, t = 2.00); spread 0.1, 0.0, 0.2 (mean 0.1, sd 0.1)
    assert ("The final agent best on test (a bound no selection rule reaches) − vanilla: 0.20 ± 0.17 (t = +2.00); "
            "the final agents' test edges span +0.10 ± 0.10 (best − worst).") in text
    # blend − vanilla: −0.1, −0.2, 0.0 (mean −0.1, sd 0.1, t = −0.1 / (0.1 / √3) = −1.73)
    assert "Each blend − vanilla: blend: the three rules -0.10 ± 0.10 (t = -1.73)." in text


def test_a_report_draws_its_plot_only_where_one_is_named(tmp_path, monkeypatch, capsys):
    """Reproducing one study's command must not redraw another study's figure in docs/img/."""
    import json
    import sys

    import benchmarks.evidence.ablations_report as reporting
    from benchmarks.evidence.ablations import main

    drawn: list = []
    monkeypatch.setattr(reporting, "plot", lambda rows, path: drawn.append(path))
    saved = tmp_path / "rows.json"
    saved.write_text(json.dumps({"rows": rows("shipped", [1.0, 2.0])}))
    monkeypatch.setattr(sys, "argv", ["ablations", "--report", str(saved)])
    main()
    assert drawn == [] and "| shipped |" in capsys.readouterr().out
    monkeypatch.setattr(sys, "argv", ["ablations", "--report", str(saved), "--plot", str(tmp_path / "f.png")])
    main()
    assert drawn == [tmp_path / "f.png"]
