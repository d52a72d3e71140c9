"""Every benchmark's history as tables a reader opens: ``docs/history/README.md``, one table
per CSV of ``docs/history/``, under how a reading is kept.

A benchmark's run appends its row to ``docs/history/KEY.csv`` and rewrites the page
(:func:`benchmarks.common.record`); the fresh-clone timings of ``make run`` and ``make test`` are
measured by hand and appended with ``--add``, stamped with the date and commit as a benchmark's
row is. The page is rendered from the CSVs alone, so it can always be rebuilt::

    .venv/bin/python -m benchmarks.history                     # rewrite docs/history/README.md
    .venv/bin/python -m benchmarks.history --add make-test '`make test`' '11 min 5 s' '...' '...'
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.common import DOCS, HISTORY, append_history, commit, now, read_history, write_history_page

FOLDER = DOCS.parent / HISTORY
"""docs/history/: one CSV per benchmark and the page that tables them."""


def add(key: str, cells: list[str], folder: Path = FOLDER) -> None:
    """Append a reading taken by hand to ``folder/KEY.csv``, stamped with :func:`now` and
    :func:`commit` ahead of ``cells``; the file's header names the columns the cells fill."""
    path = folder / f"{key}.csv"
    header, _ = read_history(path)
    row = (now(), commit(), *cells)
    if len(row) != len(header):
        raise SystemExit(f"{path}: {len(row)} cells (date, commit and {len(cells)} given) for {len(header)} "
                         f"columns: {', '.join(header) or 'no such file'}")
    append_history(path, tuple(header), row)
    write_history_page(folder)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.history", description=__doc__.split("\n\n")[0])
    parser.add_argument("--add", nargs="+", metavar=("KEY", "CELL"),
                        help="append a reading taken by hand (make-run, make-test): its cells after date and commit")
    parser.add_argument("--folder", type=Path, default=FOLDER, help="the history folder (default: docs/history)")
    args = parser.parse_args(argv)
    if args.add:
        add(args.add[0], args.add[1:], args.folder)
    print(f"wrote {write_history_page(args.folder)}")


if __name__ == "__main__":
    main()
