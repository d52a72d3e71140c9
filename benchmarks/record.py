"""Each benchmark's own section of docs/benchmarks.md: its latest reading, replaced by every
run, above a history table that gains one row per run.

A section sits between ``<!-- benchmark: KEY -->`` and ``<!-- end: KEY -->``; its history
table follows the ``### History`` heading. A section not yet in the file is appended.
docs/benchmarks.md shows the layout.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
HEAD = "# Benchmarks\n\nEach script in `benchmarks/` keeps a section here: its latest reading, then a row per run.\n"
HISTORY = "### History"


@dataclass(frozen=True)
class Reading:
    """One run of a benchmark: its latest-reading text and its row of the history table."""

    key: str  # the section's marker, e.g. "ceiling"
    title: str  # the section's heading
    latest: str  # markdown: when, the command that reproduces it, the machine, the tables
    columns: tuple[str, ...]  # the history table's header
    row: tuple[str, ...]  # this run's cells, in the order of ``columns``


def now() -> str:
    """The time a reading is stamped with (UTC, to the minute)."""
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


def cell(text: object) -> str:
    """One table cell: a pipe or a line break would end the cell or the row."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def table_line(cells: tuple[str, ...] | list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def history_rows(section: str) -> list[str]:
    """The rows (header and separator left out) of the history table in ``section``."""
    if HISTORY not in section:
        return []
    lines = [line for line in section.split(HISTORY, 1)[1].splitlines() if line.startswith("|")]
    return lines[2:]


def section(reading: Reading, rows: list[str]) -> str:
    if len(reading.row) != len(reading.columns):
        raise ValueError(f"{reading.key}: {len(reading.row)} cells for {len(reading.columns)} columns")
    return "\n".join([
        f"## {reading.title}", f"<!-- benchmark: {reading.key} -->", "", reading.latest.strip(), "", HISTORY, "",
        table_line(reading.columns), table_line(["---"] * len(reading.columns)), *rows,
        table_line([cell(c) for c in reading.row]), f"<!-- end: {reading.key} -->"])


def record(reading: Reading, path: Path = DOCS) -> None:
    """Replace ``reading.key``'s latest reading in ``path`` and append its history row."""
    text = path.read_text() if path.exists() else HEAD
    found = re.search(rf"^## [^\n]*\n<!-- benchmark: {re.escape(reading.key)} -->\n.*?"
                      rf"<!-- end: {re.escape(reading.key)} -->", text, re.S | re.M)
    if found:
        text = text[:found.start()] + section(reading, history_rows(found.group())) + text[found.end():]
    else:
        text = text.rstrip("\n") + "\n\n" + section(reading, []) + "\n"
    path.write_text(text)
