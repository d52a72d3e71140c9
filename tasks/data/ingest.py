"""Stage 1, ingest: bars from a source into ``data/raw/`` as one Parquet file per symbol.

Sources: the seeded synthetic market (default), a bars file (CSV, compressed or zipped, or
Parquet, partitioned too; ``tasks/data/files.py``) with a column mapping,
Yahoo, WRDS, Alpaca and the arch-demo data (``tasks/data/sources/``). A manifest records each
file's SHA-256. The synthetic market and files are produced whole: the same spec reuses
the files. A file's spec includes a digest of its content (every file of a Parquet folder),
so an edited or replaced file is ingested again, and the same content gives the same raw
files on any machine (docs/data.md, ingestion). Fetched sources are **incremental**: the
manifest records which date range each symbol covers, and only the missing (symbols, range)
pieces are fetched and merged. The **data version** is a hash of the files as they are on
disk, so a hand edit changes it (and validation judges it). The continuous-training cycle
fetches up to today (``latest``) and ends early when the data version is the one it last
finished on (:mod:`tasks.model.ct_record`, docs/operations.md).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from tasks.caching import data_version
from tasks.config import DataParams, Params
from tasks.data.bars import COLUMNS, read_parquet, write_parquet
from tasks.data.files import read_bars
from tasks.data.sources import Request, Source
from tasks.data.synthetic import iter_synthetic_bars
from tasks.errors import DataError
from tasks.progress import Steps
from tasks.storage import atomic_dir, file_digest, write_atomic

log = logging.getLogger("podracer.ingest")
MANIFEST = "manifest.json"
SYMBOL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,31}")
"""A ticker; it names the symbol's file under data/raw/."""
NO_SYMBOL = "_no_symbol"
"""The raw file (no ticker can be named so) of a file's rows whose symbol cell is empty: kept
for validation, which quarantines them as ``null symbol`` (docs/data.md, files)."""


@dataclass(frozen=True)
class IngestResult:
    files: list[Path]
    rows: int
    symbols: int
    data_version: str
    reused: bool


def spec_hash(data: DataParams) -> str:
    """Hash of the source spec: the same spec means the same raw data. A file source's spec
    is its settings and its content (:func:`content_digest`): its path alone would reuse the
    raw data of a file since edited or replaced."""
    spec = data.model_dump_json()
    if data.source == "file" and data.path is not None:
        spec += f"\ncontent {content_digest(Path(data.path))}"
    return hashlib.sha256(spec.encode()).hexdigest()[:16]


def content_digest(path: Path) -> str:
    """SHA-256 of what ``data.path`` holds, streamed: a file's bytes, or each file of a folder
    (a partitioned Parquet dataset) with its path inside the folder, in name order. Neither
    the folder's location nor file times enter it. A path that cannot be read digests as
    ``unreadable``; reading it then names the problem in one line."""
    try:
        if not path.is_dir():
            return file_digest(path)
        digest = hashlib.sha256()
        for file in sorted(p for p in path.rglob("*") if p.is_file()):
            digest.update(f"{file.relative_to(path).as_posix()}:{file_digest(file)}\n".encode())
        return digest.hexdigest()
    except OSError:
        return "unreadable"


def make_source(data: DataParams) -> Source:
    """The adapter for a fetched source (imported lazily: each pulls in its client library)."""
    if data.source == "yahoo":
        from tasks.data.sources.yahoo import YahooSource

        return YahooSource(data.yahoo)
    if data.source == "alpaca":
        from tasks.data.sources.alpaca import AlpacaSource

        return AlpacaSource(data.alpaca)
    if data.source == "wrds":
        from tasks.data.sources.wrds import WrdsSource

        return WrdsSource(data.wrds)
    if data.source == "arch-demo":
        from tasks.data.sources.arch_demo import ArchDemoSource

        return ArchDemoSource()
    raise ValueError(f"{data.source} is not a fetched source")


def per_symbol(data: DataParams) -> Iterator[tuple[str, pd.DataFrame]]:
    """``(symbol, bars)`` of a source produced whole: the synthetic market (streamed, so 100
    stocks × 10 years of minute bars never sit in memory at once) or a file import
    (``tasks/data/files.py``: compressed, zipped and partitioned files, the date rule)."""
    if data.source == "synthetic":
        chunks = iter_synthetic_bars(data.symbols, *data.span(), data.signal, data.seed, freq=data.freq,
                                     martingale=data.martingale)
        for symbol, group in itertools.groupby(chunks, key=lambda chunk: str(chunk["symbol"].iat[0])):
            yield symbol, pd.concat(list(group), ignore_index=True)
        return
    frame = read_bars(data)
    origin = str(data.path)
    _check_symbols(frame, origin)
    found = set(frame["symbol"].dropna())
    absent = [t for t in dict.fromkeys(data.tickers) if t not in found]
    if absent:  # as the fetched sources treat a ticker that returns nothing (docs/data.md, sources)
        raise DataError(f"{origin}: no bars for {', '.join(absent)} of data.tickers (unknown symbol, or no data "
                        "in data.start..data.end)")
    yield from ((str(s), g.reset_index(drop=True)) for s, g in frame.groupby("symbol", sort=True))
    nameless = frame["symbol"].isna()
    if nameless.any():
        log.warning("%s: %d row(s) with an empty symbol cell, the first at ts %s: kept apart in %s.parquet for "
                    "validation to quarantine", origin, int(nameless.sum()), frame.loc[nameless, "ts"].iloc[0],
                    NO_SYMBOL)
        yield NO_SYMBOL, frame[nameless].reset_index(drop=True)


def missing_pieces(
    coverage: dict[str, tuple[date, date]], symbols: tuple[str, ...], start: date, end: date
) -> dict[tuple[date, date], list[str]]:
    """The (range → symbols) requests still needed to cover ``start..end`` for ``symbols``.

    A symbol never fetched needs the whole range; a covered one needs only what lies
    before or after its coverage (any gap included, so coverage stays one interval).
    Symbols that need the same range share one request, because sources batch tickers.
    """
    pieces: dict[tuple[date, date], list[str]] = {}
    for symbol in symbols:
        if symbol not in coverage:
            pieces.setdefault((start, end), []).append(symbol)
            continue
        have_start, have_end = coverage[symbol]
        if start < have_start:
            pieces.setdefault((start, have_start - timedelta(days=1)), []).append(symbol)
        if end > have_end:
            pieces.setdefault((have_end + timedelta(days=1), end), []).append(symbol)
    return pieces


def _check_symbols(bars: pd.DataFrame, origin: str) -> None:
    odd = sorted(s for s in bars["symbol"].dropna().unique() if not SYMBOL.fullmatch(s))
    if odd:
        raise DataError(f"{origin}: symbol {odd[0]!r} is not a ticker "
                        f"(letters, digits, '.', '-', '_'; {len(odd)} such)")


def _load_manifest(raw: Path) -> dict[str, Any]:
    try:
        return json.loads((raw / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}


def _write_manifest(folder: Path, record: dict[str, Any]) -> None:
    """Write the manifest atomically; it is always written after the files it describes."""
    write_atomic(folder / MANIFEST, json.dumps(record, indent=1))


def _result(files: list[Path], rows: int, reused: bool) -> IngestResult:
    symbols = sum(f.stem != NO_SYMBOL for f in files)
    return IngestResult(files, rows, symbols, data_version(files), reused)


def _reuse(raw: Path, manifest: dict[str, Any]) -> IngestResult | None:
    """The recorded files, if they are all there; hand edits are kept and reported."""
    recorded: dict[str, str] = manifest.get("files", {})
    files = [raw / name for name in recorded]
    if not files or not all(f.exists() for f in files):
        return None
    edited = [f.name for f in files if file_digest(f) != recorded[f.name]]
    if edited:
        log.warning("data/raw files changed since ingest: %s", ", ".join(edited))
    log.info("reusing %d raw files in %s", len(files), raw)
    return _result(files, int(manifest.get("rows", 0)), reused=True)


def _ingest_whole(params: Params) -> IngestResult:
    """Synthetic market or file import: same spec → reuse, else replace ``data/raw/`` whole."""
    data, raw = params.data, params.dirs.raw
    spec = spec_hash(data)
    manifest = _load_manifest(raw)
    if manifest.get("spec_hash") == spec and (reused := _reuse(raw, manifest)):
        return reused
    rows = 0
    steps = Steps(log, "ingest", data.symbols if data.source == "synthetic" else 0, "symbols")
    with atomic_dir(raw) as staging:
        for symbol, bars in per_symbol(data):
            steps.step()
            if symbol != NO_SYMBOL and not SYMBOL.fullmatch(symbol):
                raise DataError(f"source {data.source}: symbol {symbol!r} is not a ticker")
            write_parquet(bars, staging / f"{symbol}.parquet", data.freq)
            rows += len(bars)
        files = sorted(staging.glob("*.parquet"))
        _write_manifest(staging, {"spec_hash": spec, "spec": data.model_dump(mode="json"), "freq": data.freq,
                                  "rows": rows, "files": {f.name: file_digest(f) for f in files}})
    result = _result(sorted(raw.glob("*.parquet")), rows, reused=False)
    log.info("wrote %d rows for %d symbols to %s", rows, result.symbols, raw)
    return result


def _source_key(data: DataParams) -> str:
    """What must not change for fetched pieces to be merged: source, frequency, its settings."""
    settings = {"yahoo": data.yahoo, "alpaca": data.alpaca, "wrds": data.wrds}.get(data.source)
    spec = [data.source, data.freq, settings.model_dump(mode="json") if settings else None]
    return hashlib.sha256(json.dumps(spec).encode()).hexdigest()[:16]


def _ingest_pieces(params: Params, source: Source) -> IngestResult:
    """Fetched sources: fetch only the pieces the manifest lacks, merge them and rewrite.

    Each file is replaced atomically and the manifest is written last, so an interrupted
    run leaves a consistent older state that the next run completes (fetches are idempotent).
    """
    data, raw = params.data, params.dirs.raw
    key, manifest = _source_key(data), _load_manifest(raw)
    same = manifest.get("source_key") == key
    coverage = {s: (date.fromisoformat(a), date.fromisoformat(b))
                for s, (a, b) in (manifest.get("coverage", {}) if same else {}).items()}
    symbols = tuple(data.tickers) or source.default_symbols
    start, end = data.span()
    pieces = missing_pieces(coverage, symbols, start, end)
    present = {p.stem for p in raw.glob("*.parquet")}
    if not pieces and present == set(symbols) and (reused := _reuse(raw, manifest)):
        return reused
    fetched = [source.fetch(Request(tuple(syms), a, b, data.freq)) for (a, b), syms in sorted(pieces.items())]
    new = pd.concat(fetched, ignore_index=True) if fetched else pd.DataFrame(columns=list(COLUMNS))
    _check_symbols(new, f"source {data.source}")
    raw.mkdir(parents=True, exist_ok=True)
    for name in present - (set(symbols) if same else set()):
        (raw / f"{name}.parquet").unlink()  # another source, or a symbol no longer requested
    for symbol, group in new.groupby("symbol", sort=True):
        path = raw / f"{symbol}.parquet"
        if path.exists():
            group = pd.concat([read_parquet(path)[0], group]).drop_duplicates(["symbol", "ts"], keep="last")
        write_parquet(group.sort_values("ts").reset_index(drop=True), path, data.freq)
    for symbol in {s for syms in pieces.values() for s in syms}:
        have = coverage.get(symbol, (start, end))
        coverage[symbol] = (min(have[0], start), max(have[1], end))
    coverage = {s: coverage[s] for s in symbols}
    files = sorted(raw.glob("*.parquet"))
    rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    _write_manifest(raw, {"source_key": key, "source": data.source, "freq": data.freq, "rows": rows,
                          "coverage": {s: [str(a), str(b)] for s, (a, b) in sorted(coverage.items())},
                          "files": {f.name: file_digest(f) for f in files}})
    log.info("fetched %d rows in %d request(s); %d symbols in %s", len(new), len(pieces), len(files), raw)
    return _result(files, rows, reused=False)


def ingest(params: Params, latest: bool = False) -> IngestResult:
    """Write the source's bars under ``data/raw/`` (or reuse them) and return the data version.

    ``latest`` (the continuous-training cycle): a fetched source's range ends today, so it
    fetches only the bars after its coverage; the embedded market and files take what
    arrived in ``data/raw/`` (``podracer simulate``).
    """
    if params.data.source in ("synthetic", "file"):
        return _ingest_whole(params)
    if latest:
        params = params.model_copy(update={"data": params.data.model_copy(update={"end": date.today()})})
    return _ingest_pieces(params, make_source(params.data))
