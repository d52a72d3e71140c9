"""The several-algorithms report (benchmarks/evidence/algorithms_report.py): every arm paired with
buy-and-hold and with the PPO champion per seed, written between its markers only."""

from benchmarks.evidence.algorithms_report import BEGIN, END, write_section
from tests.benchmarks.evidence.test_results_report import rows


def test_arms_are_paired_with_the_ppo_champion_and_the_section_replaced_in_place(tmp_path):
    page = tmp_path / "results.md"
    page.write_text(f"# head\n\n{BEGIN}\nold text\n{END}\n\n## Reproduce\ntail\n")
    result = {"command": "algorithms.py --seeds 0-2", "minutes": 3.0, "finished": "2026-11-25 14:00 UTC",
              "rows": rows({"ppo": [1.0, 2.0, 3.0], "sac": [2.0, 4.0, 6.0], "buy-and-hold": [0.5, 0.5, 0.5]})}
    write_section([result], [], page)
    text = page.read_text()
    assert text.startswith(f"# head\n\n{BEGIN}\n") and text.endswith(f"{END}\n\n## Reproduce\ntail\n")
    assert "old text" not in text and (tmp_path / "img" / "algorithms.png").exists()
    # sac − ppo per seed: 1, 2, 3 → mean 2, sd 1, t = 2 / (1/√3) = 3.46
    assert "| learnable | sac − ppo | 2.00 ± 1.00 (t = +3.46) |" in text
    # ppo − buy-and-hold: 0.5, 1.5, 2.5 → mean 1.5, sd 1, t = 2.60
    assert "| learnable | ppo − buy-and-hold | 1.50 ± 1.00 (t = +2.60) |" in text
