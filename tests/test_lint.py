"""The tree passes ruff's checks as ``pyproject.toml`` sets them (``[tool.ruff]``): no unused,
undefined or redefined names, imports in order, lines within 120 characters. It runs the
ruff that ``make install`` pins, on every file git does not ignore (docs/testing.md)."""

import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def test_the_tree_passes_ruffs_checks() -> None:
    ruff = Path(sys.executable).with_name("ruff")
    done = subprocess.run([str(ruff), "check", "--no-cache", "--output-format", "concise", "."], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"ruff check found:\n{done.stdout}{done.stderr}"
