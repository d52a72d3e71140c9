"""Stage 1, ingest: bars from a source into ``data/raw/`` as one Parquet file per symbol.

Sources: the seeded synthetic market (default) or a CSV/Parquet file with a column
mapping. A manifest records the source spec and each file's SHA-256; a later run with
the same spec reuses the files instead of fetching again. The **data version** is a hash
of the files as they are on disk, so a hand edit changes it (and validation judges it).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.bars import to_contract, write_parquet
from tasks.config import DataParams, Params
from tasks.errors import DataError
from tasks.storage import atomic_dir, file_digest
from tasks.synthetic import synthetic_bars

log = logging.getLogger("podracer.ingest")
MANIFEST = "manifest.json"
SYMBOL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,31}")
"""A ticker; it names the symbol's file under data/raw/."""


@dataclass(frozen=True)
class IngestResult:
    files: list[Path]
    rows: int
    symbols: int
    data_version: str
    reused: bool


def spec_hash(data: DataParams) -> str:
    """Hash of the source spec: the same spec means the same raw data."""
    return hashlib.sha256(data.model_dump_json().encode()).hexdigest()[:16]


def data_version(files: list[Path]) -> str:
    """Content hash of the raw files (names and bytes), 16 hex characters."""
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(f"{path.name}:{file_digest(path)}\n".encode())
    return digest.hexdigest()[:16]


def current_version(params: Params) -> str:
    """Data version of what is in ``data/raw/`` now."""
    return data_version(sorted(params.dirs.raw.glob("*.parquet")))


def read_source(data: DataParams) -> pd.DataFrame:
    """Bars from the configured source, in the bars contract."""
    if data.source == "synthetic":
        return synthetic_bars(data.symbols, data.start, data.end, data.signal, data.seed)
    assert data.path is not None
    return to_contract(_read_file(data.path).rename(columns=data.columns), str(data.path))


def _read_file(path: Path) -> pd.DataFrame:
    if not path.exists():
        raise DataError(f"{path}: no such file")
    try:
        if path.suffix.lower() in (".parquet", ".pq"):
            return pd.read_parquet(path)
        if path.suffix.lower() == ".csv":
            return pd.read_csv(path)
    except UnicodeDecodeError:
        raise DataError(f"{path}: not UTF-8 text") from None
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: empty file") from None
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: unreadable ({str(exc).splitlines()[0]})") from None
    raise DataError(f"{path}: unsupported file type (use .csv or .parquet)")


def _load_manifest(raw: Path) -> dict[str, object] | None:
    try:
        return json.loads((raw / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def ingest(params: Params) -> IngestResult:
    """Write the source's bars under ``data/raw/`` (or reuse them) and return the data version."""
    raw = params.dirs.raw
    spec = spec_hash(params.data)
    manifest = _load_manifest(raw)
    if manifest and manifest.get("spec_hash") == spec:
        recorded: dict[str, str] = manifest["files"]  # type: ignore[assignment]
        files = [raw / name for name in recorded]
        if all(f.exists() for f in files):
            edited = [f.name for f in files if file_digest(f) != recorded[f.name]]
            if edited:
                log.warning("data/raw files changed since ingest: %s", ", ".join(edited))
            log.info("reusing %d raw files in %s", len(files), raw)
            rows = int(manifest.get("rows", 0))  # type: ignore[call-overload]
            return IngestResult(files, rows, len(files), data_version(files), reused=True)

    bars = read_source(params.data)
    origin = str(params.data.path) if params.data.source == "file" else f"source {params.data.source}"
    if bars.empty:
        raise DataError(f"{origin}: no bars between {params.data.start} and {params.data.end}")
    odd = sorted(s for s in bars["symbol"].unique() if not SYMBOL.fullmatch(s))
    if odd:
        raise DataError(f"{origin}: symbol {odd[0]!r} is not a ticker "
                        f"(letters, digits, '.', '-', '_'; {len(odd)} such)")
    with atomic_dir(raw) as staging:
        for symbol, group in bars.groupby("symbol", sort=True):
            write_parquet(group.reset_index(drop=True), staging / f"{symbol}.parquet", params.data.freq)
        files = sorted(staging.glob("*.parquet"))
        record = {
            "spec_hash": spec,
            "spec": params.data.model_dump(mode="json"),
            "freq": params.data.freq,
            "rows": len(bars),
            "files": {f.name: file_digest(f) for f in files},
        }
        (staging / MANIFEST).write_text(json.dumps(record, indent=1))
    files = sorted(raw.glob("*.parquet"))
    log.info("wrote %d rows for %d symbols to %s", len(bars), len(files), raw)
    return IngestResult(files, len(bars), len(files), data_version(files), reused=False)


ingest_task = task(ingest, name="ingest", cache_policy=NO_CACHE)
