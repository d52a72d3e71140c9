"""A Python environment with only what the GPU machine has, to rehearse its one run here
(shared/DESIGN.md §12; docs/training.md, GPU workers).

The GPU machine has PyTorch, Triton, numpy, pandas and pyarrow, and whatever wheels travel
with the tree in ``.whl/`` (dask's); no Prefect, MLflow, pydantic or anything else of
``.venv``. A device run is rare and short, so an import that reaches past those must fail
here, not there. :func:`device_python` makes a virtual environment without pip whose
``site-packages`` holds links to exactly those distributions of the running interpreter's
environment and everything they require (their ``Requires-Dist``, extras left out), and
returns its interpreter. The device script's sections then run in it, each in its own
process, as they do on the device:

    .venv/bin/python -m standins.device /tmp/device    # prints /tmp/device/bin/python
    /tmp/device/bin/python -m benchmarks.perf.gpu --device cpu --tiny --out /tmp/device-out

What this cannot stand in for is the device's versions: its Python 3.12 and PyTorch 2.11,
which pins Triton 3.6.0 (this environment links ``.venv``'s).
"""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

DEVICE = ("torch", "triton", "numpy", "pandas", "pyarrow")
"""The distributions the GPU machine's Python has (shared/DESIGN.md §12)."""
CARRIED = ("dask", "distributed")
"""The wheels that travel to it in ``.whl/`` (benchmarks/perf/gpu.py's ``dask`` section)."""


def required(names: tuple[str, ...]) -> dict[str, metadata.Distribution]:
    """``names`` and every distribution they require, transitively, as installed here (a
    requirement whose marker does not hold on this interpreter, or that only an extra asks
    for, is left out)."""
    found: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in found:
            continue
        found[name] = dist = metadata.distribution(name)
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return found


def device_python(folder: Path, names: tuple[str, ...] = DEVICE + CARRIED) -> Path:
    """A virtual environment at ``folder`` whose packages are ``names`` and what they require,
    linked from this interpreter's environment (every top-level entry of their installed
    files: packages, modules, bundled libraries, metadata); its interpreter's path."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    site = Path(subprocess.run([str(folder / "bin" / "python"), "-c", "import sysconfig; "
                                "print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True,
                               check=True).stdout.strip())
    for dist in required(names).values():
        for top in {Path(str(file)).parts[0] for file in dist.files or []} - {"..", "__pycache__"}:
            source = Path(str(dist.locate_file(top)))
            if source.exists() and not (site / top).exists():
                (site / top).symlink_to(source)
    return folder / "bin" / "python"


if __name__ == "__main__":
    print(device_python(Path(sys.argv[1])))
