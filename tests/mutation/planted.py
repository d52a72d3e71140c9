"""Re-plant the bugs once found by hand (docs/testing.md, Planted bugs), one at a time, and
check that a named test catches each.

Each plant is an edit of a line or two of today's code. For each, the source tree is copied to a
temporary folder, the edit is applied there (the checkout is never touched), and the
tests that should catch it run against the copy; they must fail. Then the same tests run
on the unedited copy and must pass. Prints one line per plant and exits 1 if any got through.

    .venv/bin/python -m tests.mutation.planted [NUMBER ...]

A row of two or three plants (docs/testing.md says "two plants") plants each alone: ``89a``,
``89b``. The catalogue is ``tests/mutation/bugs_trainers.py``, ``bugs_benchmarks.py`` and
``bugs_pipeline.py`` (the rest), by where the edit lands; ``tests/mutation/test_planted.py``
keeps it equal to the table and its edits current.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.mutation.bug import Bug, Entry
from tests.mutation.bugs_benchmarks import BENCHMARKS
from tests.mutation.bugs_pipeline import PIPELINE
from tests.mutation.bugs_trainers import TRAINERS

REPO = Path(__file__).resolve().parents[2]
COPY = ("flows", "tasks", "trainers", "deploy", "tests", "standins", "benchmarks", "docs", "README.md",
        "pyproject.toml", ".env", "params.yaml", "params.minute.yaml", "params.paper.yaml")


BUGS: dict[int, Entry] = {**TRAINERS, **PIPELINE, **BENCHMARKS}
"""Every row of docs/testing.md's table, by its number."""


def plants(number: int) -> list[tuple[str, Bug]]:
    """Bug ``number``'s plants with their labels: ``7``, or ``89a`` and ``89b`` for a row of two."""
    entry = BUGS[number]
    if isinstance(entry, Bug):
        return [(str(number), entry)]
    return [(f"{number}{chr(ord('a') + i)}", bug) for i, bug in enumerate(entry)]


def pytest(root: Path, tests: tuple[str, ...]) -> bool:
    """Whether ``tests`` pass in the copy at ``root``."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:randomly", *tests], cwd=root,
                          capture_output=True, text=True)
    return done.returncode == 0


def current(bug: Bug, root: Path = REPO) -> bool:
    """Whether the text ``bug`` edits is in its file exactly once (else the catalogue is stale)."""
    path = root / bug.path
    return path.is_file() and path.read_text().count(bug.old) == 1


def check(label: str, bug: Bug) -> bool:
    """Plant ``bug`` in a copy of the tree: its tests must pass without it and fail with it."""
    with tempfile.TemporaryDirectory(prefix="planted-") as tmp:
        root = Path(tmp)
        for name in COPY:
            source = REPO / name
            if source.is_dir():
                shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(source, root / name)
        if not current(bug, root):
            print(f"{label:>4}. {bug.what}: STALE (the line to edit is not in {bug.path} exactly once)")
            return False
        clean = pytest(root, bug.tests)
        target = root / bug.path
        text = target.read_text()
        target.write_text(text.replace(bug.old, bug.new))
        caught = not pytest(root, bug.tests)
    verdict = "caught" if clean and caught else ("FAILS WITHOUT THE BUG" if not clean else "GOT THROUGH")
    print(f"{label:>4}. {bug.what}: {verdict} by {', '.join(bug.tests)}", flush=True)
    return clean and caught


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("numbers", nargs="*", type=int, help="bugs to plant (default: all)")
    numbers = parser.parse_args().numbers or sorted(BUGS)
    results = [check(label, bug) for n in numbers for label, bug in plants(n)]
    print(f"{sum(results)} of {len(results)} planted bugs caught")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
