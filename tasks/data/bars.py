"""The bars contract (docs/data.md, contracts) and its Parquet files.

Columns ``symbol`` (str), ``ts`` (tz-aware UTC bar start), ``open``, ``high``, ``low``,
``close`` (float64) and ``volume`` (float64); rows sorted by symbol, then ts. The bar
frequency is stored in each file's Parquet metadata under ``podracer.freq``; the validated
file also records the data version of the raw files it was validated from
(``podracer.data_version``), so the features stage never reads a set validated from other data.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from tasks.errors import DataError

COLUMNS = ("symbol", "ts", "open", "high", "low", "close", "volume")
VALIDATED = "bars.parquet"
"""The validated bars' file name under ``data/validated/`` (features and the paper broker read it)."""
PRICE_COLUMNS = ("open", "high", "low", "close")
FREQ_KEY = b"podracer.freq"
VERSION_KEY = b"podracer.data_version"
"""The validated file's record of the raw data version it was validated from (features checks it)."""


def to_contract(frame: pd.DataFrame, origin: str, *, sort: bool = True) -> pd.DataFrame:
    """Coerce ``frame`` to the contract's columns and dtypes, or raise a one-line DataError.

    Only the shape is enforced here (columns, dtypes, UTC timestamps and, unless
    ``sort=False``, order); value checks (prices > 0, high/low consistency, duplicates,
    nulls, order) are validation's job, so bad rows reach the quarantine instead of
    failing the import. A missing symbol stays missing (None), as docs/data.md says of an
    empty cell, rather than becoming the text ``nan``.
    """
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise DataError(f"{origin}: missing column(s) {', '.join(missing)}")
    out = frame.loc[:, list(COLUMNS)].copy()
    symbol = out["symbol"]  # an empty cell stays missing (validation quarantines it), never the ticker 'nan'
    out["symbol"] = symbol.astype(str).astype(object).where(symbol.notna(), None)
    for col in (*PRICE_COLUMNS, "volume"):
        try:
            out[col] = pd.to_numeric(out[col], errors="raise").astype("float64")
        except (ValueError, TypeError):
            raise DataError(f"{origin}: column {col} is not numeric") from None
    ts = out["ts"]
    if not isinstance(ts.dtype, pd.DatetimeTZDtype):
        try:
            ts = pd.to_datetime(ts, utc=False)
        except (ValueError, TypeError):
            raise DataError(f"{origin}: column ts is not a timestamp") from None
        if not isinstance(ts.dtype, pd.DatetimeTZDtype):
            raise DataError(f"{origin}: column ts has no time zone (expected tz-aware UTC)")
    out["ts"] = ts.dt.tz_convert("UTC").astype("datetime64[ns, UTC]")
    if not sort:
        return out.reset_index(drop=True)
    return out.sort_values(["symbol", "ts"], kind="stable").reset_index(drop=True)


def write_parquet(frame: pd.DataFrame, path: Path, freq: str) -> None:
    """Write ``frame`` atomically (temp file in the same folder, then rename)."""
    table = pa.Table.from_pandas(frame, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), FREQ_KEY: freq.encode()})
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def read_parquet(path: Path) -> tuple[pd.DataFrame, str | None]:
    """Read a bars file and its recorded frequency; a corrupt file is a one-line DataError."""
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"{path}: unreadable Parquet ({str(exc).splitlines()[0]})") from None
    freq = (table.schema.metadata or {}).get(FREQ_KEY)
    return table.to_pandas(), freq.decode() if freq else None


def recorded_version(path: Path) -> str | None:
    """The raw data version a validated file records (None: it records none); a file that
    cannot be read is a one-line DataError."""
    try:
        meta = pq.read_schema(path).metadata or {}
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"{path}: unreadable Parquet ({str(exc).splitlines()[0]})") from None
    version = meta.get(VERSION_KEY)
    return version.decode() if version else None


def panel(bars: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Pivot bars to ``[T, n]`` frames per field over every timestamp any symbol has, plus
    ``real`` (bool): where the symbol has a bar of its own.

    Nothing is cut to a common start. Where a symbol has no bar, the prices carry its last
    real close (its first real close before it lists) and the volume is 0, only so that
    marking a zero position stays finite: those cells are masked as untradable
    (``tasks/data/tradable.py``) and never traded at nor shown to a policy.
    """
    wide = {f: bars.pivot(index="ts", columns="symbol", values=f).sort_index() for f in
            ("open", "high", "low", "close", "volume")}
    real = wide["close"].notna()
    if real.empty:
        raise DataError("features: no bars")
    close = wide["close"].ffill().bfill()
    for field in ("open", "high", "low"):
        wide[field] = wide[field].fillna(close)
    wide["close"], wide["volume"], wide["real"] = close, wide["volume"].fillna(0.0), real
    return wide


ROW_GROUP = 2**17
"""Rows per row group (about a year of one symbol's minutes): readers of a recent window
(the broker's feed) skip older groups by their ``ts`` statistics."""


class BarsWriter:
    """A bars file written one symbol at a time (the data layer streams per symbol, docs/data.md).

    Each :meth:`write` appends one symbol's rows, sorted by ts, as row groups of their own, so
    a row group never mixes symbols and :func:`iter_symbols` reads one symbol at a time. The
    file appears at ``path`` only on :meth:`close` (atomic rename); an error leaves nothing.
    ``data_version``, when given, is recorded in the file's metadata (:func:`recorded_version`).
    """

    def __init__(self, path: Path, freq: str, data_version: str | None = None) -> None:
        self.path, self.freq = path, freq
        self._meta = {FREQ_KEY: freq.encode(), **({VERSION_KEY: data_version.encode()} if data_version else {})}
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, self._tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        self._writer: pq.ParquetWriter | None = None
        self.rows = 0

    def write(self, frame: pd.DataFrame) -> None:
        table = pa.Table.from_pandas(frame.loc[:, list(COLUMNS)], preserve_index=False)
        if self._writer is None:
            schema = table.schema.with_metadata({**(table.schema.metadata or {}), **self._meta})
            self._writer = pq.ParquetWriter(self._tmp, schema)
        self._writer.write_table(table.replace_schema_metadata(self._writer.schema.metadata), row_group_size=ROW_GROUP)
        self.rows += len(frame)

    def close(self) -> None:
        if self._writer is None:
            self.write(pd.DataFrame({c: pd.Series(dtype=t) for c, t in _EMPTY.items()}))
        assert self._writer is not None
        self._writer.close()
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if os.path.exists(self._tmp):
            os.unlink(self._tmp)

    def __enter__(self) -> BarsWriter:
        return self

    def __exit__(self, kind: object, *_: object) -> None:
        self.abort() if kind is not None else self.close()


_EMPTY = {"symbol": "object", "ts": "datetime64[ns, UTC]", "open": "float64", "high": "float64",
          "low": "float64", "close": "float64", "volume": "float64"}


def iter_symbols(path: Path, columns: list[str] | None = None) -> Iterator[tuple[str, pd.DataFrame]]:
    """``(symbol, rows)`` of a bars file sorted by symbol, one symbol in memory at a time
    (row group by row group; a symbol spread over several groups is joined, and a group
    holding several symbols, as :func:`write_parquet` writes, is split)."""
    try:
        source = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"{path}: unreadable Parquet ({str(exc).splitlines()[0]})") from None
    wanted = None if columns is None else list(dict.fromkeys(["symbol", *columns]))
    pending: list[pd.DataFrame] = []
    for i in range(source.num_row_groups):
        frame = source.read_row_group(i, columns=wanted).to_pandas()
        if frame.empty:
            continue
        symbols = frame["symbol"].to_numpy()
        cuts = np.flatnonzero(symbols[1:] != symbols[:-1]) + 1
        for part in np.split(np.arange(len(frame)), cuts):
            piece = frame.iloc[part[0] : part[-1] + 1]
            if pending and pending[0]["symbol"].iat[0] != piece["symbol"].iat[0]:
                yield str(pending[0]["symbol"].iat[0]), pd.concat(pending, ignore_index=True)
                pending = []
            pending.append(piece)
    if pending:
        yield str(pending[0]["symbol"].iat[0]), pd.concat(pending, ignore_index=True)
