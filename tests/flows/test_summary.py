"""The end-of-run tables say what a trading cycle did."""

from rich.console import Console

from flows.summary import orders_table
from tasks.delivery.client.loop import CycleResult


def rendered(result: CycleResult) -> str:
    console = Console(width=120, record=True)
    console.print(orders_table(result))
    return " ".join(console.export_text().split())  # the caption wraps at the table's width


def test_a_held_bar_says_so_and_lists_no_orders():
    held = CycleResult("2023-12-29", "1", "models:/podracer-ppo/1", cash=10.0, equity=20.0, decided=False)
    text = rendered(held)
    assert "held: no decision on this bar (env.decide_every)" in text and "no orders" in text
    assert "held" not in rendered(CycleResult("2023-12-29", "1", "models:/podracer-ppo/1"))
