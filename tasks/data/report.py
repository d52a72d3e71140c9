"""The validation report (``data/quarantine/report.md``, docs/data.md, validation) and the
small per-batch summaries it is built from.

Validation streams its batches (``tasks/data/validate.py``), so the report never sees all
rows: :class:`Tally` keeps the counts, each file's quarantined checks, the first
:data:`LISTED` hard-limit rows and suspected splits, and the biggest flagged outliers (ties at
the cut kept), which is all the report prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from tasks.data.coverage import PanelCoverage, coverage_lines
from tasks.data.limits import LIMIT_REASON

LISTED = 20
"""Rows the report lists of each kind (hard-limit rows, flagged outliers, suspected splits)."""
SPLIT_ADVICE = ("These bars gap by a split ratio and then stay put: unadjusted prices around a stock split? "
                "Use split-adjusted data (yfinance auto_adjust=True, CRSP prices divided by cfacpr).")


def checks_of(joined: str) -> list[str]:
    """The checks a row failed, without the per-row details after ``": "`` (the hard limit's)."""
    return [reason.split(": ", 1)[0] for reason in joined.split("; ")]


@dataclass
class FileTally:
    """One raw file's quarantined rows."""

    rows: int = 0
    checks: dict[str, int] = field(default_factory=dict)
    """Rows per check, in the order the checks first appear."""
    over: list[str] = field(default_factory=list)
    """Its first hard-limit reasons, in full."""


@dataclass
class Tally:
    """What the report and the failure line need, summed over batches in symbol order."""

    rows_in: int = 0
    files: dict[str, FileTally] = field(default_factory=dict)
    flagged: int = 0
    top_flagged: list[pd.DataFrame] = field(default_factory=list)
    splits: int = 0
    _splits: list[pd.DataFrame] = field(default_factory=list)

    def add_rows(self, rows: int) -> None:
        self.rows_in += rows

    def add_bad(self, file: str, reasons: pd.Series) -> None:
        """A file's quarantined rows (all of them: a file is in one batch), by their reasons."""
        tally = self.files[file] = FileTally(len(reasons))
        for joined in reasons:
            for check in checks_of(joined):
                tally.checks[check] = tally.checks.get(check, 0) + 1
            if len(tally.over) < LISTED:
                tally.over += [r for r in joined.split("; ") if r.startswith(LIMIT_REASON + ": ")]

    def add_flagged(self, flagged: pd.DataFrame) -> None:
        self.flagged += len(flagged)
        if len(flagged) > LISTED:
            flagged = flagged[flagged["robust_z"] >= flagged["robust_z"].nlargest(LISTED).iloc[-1]]
        self.top_flagged.append(flagged)

    def add_splits(self, splits: pd.DataFrame) -> None:
        if self.splits < LISTED and len(splits):
            self._splits.append(splits.head(LISTED - self.splits))
        self.splits += len(splits)

    @property
    def first_splits(self) -> pd.DataFrame:
        """The first :data:`LISTED` suspected splits, in (symbol, ts) order."""
        return pd.concat(self._splits, ignore_index=True) if self._splits else pd.DataFrame()

    @property
    def bad_rows(self) -> int:
        return sum(f.rows for f in self.files.values())

    def _in_file_order(self) -> list[tuple[str, FileTally]]:
        return sorted(self.files.items())

    def per_file(self) -> str:
        """Each file with quarantined rows: its count and checks (the failure line's middle)."""
        return "; ".join(f"{name}: {f.rows} ({', '.join(sorted(f.checks))})" for name, f in self._in_file_order())

    def check_counts(self) -> pd.Series:
        """Rows per check, most first; a tie in the order the checks first appear in file order."""
        counts: dict[str, int] = {}
        for _, f in self._in_file_order():
            for check, rows in f.checks.items():
                counts[check] = counts.get(check, 0) + rows
        return pd.Series(counts, dtype="int64").sort_values(ascending=False)

    def biggest_flags(self) -> pd.DataFrame:
        """The :data:`LISTED` biggest flagged outliers, biggest first (a tie in (symbol, ts) order)."""
        if not self.top_flagged:
            return pd.DataFrame(columns=["symbol", "ts", "log_return", "robust_z"])
        flagged = pd.concat(self.top_flagged, ignore_index=True)
        return flagged.sort_values("robust_z", ascending=False, kind="stable").head(LISTED)


def write_report(path: Path, tally: Tally, cover: PanelCoverage | None = None) -> None:
    bad = tally.bad_rows
    lines = [
        "# Validation report",
        "",
        f"- rows in: {tally.rows_in}",
        f"- rows quarantined: {bad}",
        f"- rows out: {tally.rows_in - bad}",
        f"- return outliers flagged (kept): {tally.flagged}",
        f"- suspected splits (kept): {tally.splits}",
        "",
    ]
    if bad:
        lines += ["| check | rows |", "|---|---|", *(f"| {r} | {n} |" for r, n in tally.check_counts().items()), ""]
        lines += ["| file | rows | reasons |", "|---|---|---|"]
        lines += [f"| {name} | {f.rows} | {', '.join(sorted(f.checks))} |" for name, f in tally._in_file_order()]
        lines.append("")
        over = [r for _, f in tally._in_file_order() for r in f.over][:LISTED]
        if over:
            lines += [f"Quarantined by the hard limit (first {LISTED}):", "", *(f"- {r}" for r in over), ""]
    if tally.flagged:
        lines += ["| symbol | ts | log return | robust z |", "|---|---|---|---|"]
        for row in tally.biggest_flags().itertuples():
            lines.append(f"| {row.symbol} | {row.ts} | {row.log_return:.4f} | {row.robust_z:.1f} |")
    if tally.splits:
        lines += ["", "## Suspected splits", "", SPLIT_ADVICE, "",
                  "| symbol | ts | open / previous close | looks like |", "|---|---|---|---|"]
        lines += [f"| {r.symbol} | {r.ts} | {r.ratio:.4f} | {r.split} |" for r in tally.first_splits.itertuples()]
    if cover is not None:
        lines += ["", *coverage_lines(cover)] if lines[-1] else coverage_lines(cover)
    path.write_text("\n".join(lines) + "\n")
