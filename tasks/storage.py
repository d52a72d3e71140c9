"""Atomic writes: a stage's output folder appears whole or not at all."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_dir(target: Path) -> Iterator[Path]:
    """Yield a staging folder beside ``target``; on success it replaces ``target``.

    If the block raises, ``target`` keeps its previous content and the staging folder
    is removed, so readers never see a half-written output.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-"))
    try:
        yield staging
        if target.exists():
            old = target.with_name(f".{target.name}-old")
            shutil.rmtree(old, ignore_errors=True)
            target.rename(old)
            staging.rename(target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
