"""Tables and the plot of ``benchmarks/evidence/algorithms.py``'s rows: each arm per market, and every
arm paired per seed with buy-and-hold and with the PPO tournament's champion, with t
statistics (its section of ``docs/results-tables.md`` and ``docs/img/algorithms.png``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.evidence.results_report import arm_table, critical_t, minutes_of, pair_table, plot_seeds, rows_of

ARMS = ("ppo", "sac", "mixed", "mixed-ensemble", "ppo-ensemble", "momentum", "oracle", "buy-and-hold")
LEARNED = ("sac", "mixed", "mixed-ensemble", "ppo-ensemble")
PAIRS = (("ppo", "buy-and-hold"), *((a, "buy-and-hold") for a in LEARNED), ("momentum", "buy-and-hold"),
         *((a, "ppo") for a in LEARNED))
BEGIN, END = "<!-- algorithms.py: begin -->", "<!-- algorithms.py: end -->"


def report(results: list[dict[str, Any]]) -> str:
    rows = rows_of(results)
    seeds = sorted({r["seed"] for r in rows})
    return "\n".join([
        f"Command: `{' && '.join(res['command'] for res in results)}` (seeds {', '.join(map(str, seeds))}; "
        f"{minutes_of(results)} on this machine, {results[-1].get('finished', '')}).", "",
        *arm_table(rows, ARMS), "",
        "Paired per seed, mean ± std of the difference and its t statistic "
        f"({len(seeds) - 1} degrees of freedom; |t| > {critical_t(len(seeds)):.2f} is significant at 5%, two-sided):",
        "", *pair_table(rows, PAIRS)])


def write_section(results: list[dict[str, Any]], dev: list[dict[str, Any]], out: Path | None) -> None:
    """Print the evidence (and the development runs'); with ``out``, replace the text between
    its markers, above ``results.py``'s part of the page, and draw the plot beside it."""
    text = report(results)
    dev_text = report(dev) if dev else ""
    print(text + (f"\n\nDevelopment seeds:\n\n{dev_text}" if dev else ""))
    if out is None:
        return
    images = out.parent / "img"
    images.mkdir(parents=True, exist_ok=True)
    plot_seeds(rows_of(results), images / "algorithms.png", ARMS)
    body = ["### Evidence (seeds not used before, run once)", "", text, "",
            "![test Sharpe per seed and arm](img/algorithms.png)"]
    if dev:
        body += ["", "### Development seeds (the design was chosen on these)", "", dev_text]
    page = out.read_text()
    head, rest = page.split(BEGIN)
    _, tail = rest.split(END)
    out.write_text(f"{head}{BEGIN}\n" + "\n".join(body) + f"\n{END}{tail}")
