"""The commit a device run measured, and whether its tree was clean, checked by the run itself.

A GPU machine receives a copy of the working tree, not a trustworthy ``.git`` (docs/benchmarks.md,
GPU). So, before the run, this machine writes a stamp: the commit and the git blob hash of every
file it holds (``.stamp/tree.json``, ignored by git, carried to the device). On the device,
:func:`tree_state` hashes every file again the way git does and compares: the JSON then says
which commit it measured, and ``clean: false`` with the files that differ when the tree was
not that commit's. Where there is no stamp, git is asked.

    .venv/bin/python -m benchmarks.perf.tree     # here, before each device run: write the stamp

Standard library and benchmarks/common.py only.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path
from typing import Any

from benchmarks.common import commit

ROOT = Path(__file__).resolve().parents[2]
STAMP = ROOT / ".stamp" / "tree.json"
SHOWN = 20
"""Changed files named in a result, at most."""


def blob_hash(path: Path) -> str:
    """``git hash-object`` of ``path``: SHA-1 of ``blob <size>\\0`` and the content (a symbolic
    link's content being its target)."""
    data = os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def write_stamp(path: Path = STAMP) -> dict[str, Any]:
    """Stamp HEAD: its commit and each committed file's blob hash (submodules left out)."""
    files = {}
    for line in _git("ls-tree", "-r", "-z", "HEAD").split("\0"):
        if line:
            meta, name = line.split("\t", 1)
            mode, kind, sha = meta.split()
            if kind == "blob":
                files[name] = sha
    stamp = {"commit": _git("rev-parse", "HEAD").strip(), "files": files}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(stamp))
    return stamp


def tree_state(root: Path = ROOT, stamp: Path = STAMP) -> dict[str, Any]:
    """``{"commit", "clean", "changed", "checked_by"}`` of the tree at ``root``: against the stamp
    when there is one (every stamped file hashed again; missing and modified files are
    changes), else by git (:func:`benchmarks.common.commit`, which names no files);
    ``commit: unknown`` when neither can say."""
    if stamp.exists():
        saved = json.loads(stamp.read_text())
        changed = [name for name, sha in saved["files"].items() if _differs(root / name, sha)]
        return {"commit": saved["commit"][:7], "clean": not changed, "changed": changed[:SHOWN],
                "checked_by": "stamp"}
    said = commit()
    if said.startswith("unknown"):
        return {"commit": "unknown", "clean": False, "changed": [], "checked_by": "nothing: no stamp, no git"}
    return {"commit": said.removesuffix("-dirty"), "clean": not said.endswith("-dirty"), "changed": [],
            "checked_by": "git"}


def _differs(path: Path, sha: str) -> bool:
    """Whether the file at ``path`` is missing or is not the blob ``sha``."""
    return not (path.exists() or path.is_symlink()) or blob_hash(path) != sha


if __name__ == "__main__":
    written = write_stamp()
    print(f"{STAMP.relative_to(ROOT)}: {written['commit'][:7]}, {len(written['files']):,} files")
    if _git("status", "--porcelain", "--untracked-files=no").strip():
        print("warning: tracked files differ from HEAD: the device run will say clean: false (commit first)")
