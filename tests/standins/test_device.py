"""standins/device.py: an environment with only the GPU machine's packages (the device script's
smoke test, tests/benchmarks/perf/test_gpu.py, runs in the full one)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from standins.device import device_python, required


def test_a_distribution_brings_what_it_requires_and_nothing_else() -> None:
    # pandas 2.2 requires numpy, python-dateutil, pytz and tzdata; python-dateutil requires six
    assert set(required(("pandas",))) == {"pandas", "numpy", "python-dateutil", "pytz", "tzdata", "six"}


def test_its_python_imports_what_it_holds_and_nothing_else(tmp_path: Path) -> None:
    python = device_python(tmp_path / "env", ("pandas",))
    held = subprocess.run([str(python), "-c", "import pandas, dateutil, six; print(pandas.__version__)"],
                          capture_output=True, text=True)
    assert held.returncode == 0, held.stderr
    for name in ("pydantic", "torch", "yaml"):  # in .venv, not in the environment
        missing = subprocess.run([str(python), "-c", f"import {name}"], capture_output=True, text=True)
        assert f"No module named '{name}'" in missing.stderr
