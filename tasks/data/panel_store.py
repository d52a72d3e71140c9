"""The ``[T, n]`` panel of the validated bars, built one symbol at a time and kept on disk
(docs/data.md, features: streaming at the paper's scale).

At 100 symbols × 10 years of minute bars one ``[T, n]`` float64 field is 786 MB, so the
features stage never pivots the bars in memory. :func:`scan` reads the timestamps (pass 1);
:func:`symbol_rows` places one symbol's bars on them with the fills of
``tasks/data/bars.py::panel`` (pass 2); :class:`ColumnStore` keeps the per-symbol columns in a
temporary file and hands back ``[B, n]`` row blocks; :class:`NpyWriter` writes the saved
``.npy`` arrays row block by row block with plain file writes, so neither side ever holds a
whole field, nor maps one into the process's memory for long.
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pandas as pd

from tasks.data.bars import iter_symbols
from tasks.errors import DataError

FIELDS = ("open", "high", "low", "close", "volume")


def ns(ts: pd.Series) -> np.ndarray:
    """A tz-aware UTC timestamp column as int64 nanoseconds."""
    return ts.array.asi8  # type: ignore[attr-defined, no-any-return]


@dataclass(frozen=True)
class Scan:
    """Pass 1 over a bars file: the panel's rows and columns."""

    path: Path
    index: np.ndarray
    """``[T]`` int64 ns UTC, sorted: every timestamp any symbol has (the panel's rows)."""
    symbols: list[str]
    """Sorted, as in the file (the panel's columns)."""
    real_bars: np.ndarray
    """``[n]`` bars with a close per symbol."""

    @property
    def ragged(self) -> bool:
        """Whether some symbol misses a bar of the panel (then indicators run per symbol on its own bars)."""
        return bool((self.real_bars < len(self.index)).any())


def scan(path: Path) -> Scan:
    """The union of every symbol's timestamps, reading only ``ts`` and ``close``; a symbol out
    of order or with a repeated timestamp is a one-line DataError."""
    index = np.empty(0, np.int64)
    symbols: list[str] = []
    real: list[int] = []
    for symbol, rows in iter_symbols(path, ["ts", "close"]):
        ts = ns(rows["ts"])
        if symbols and symbol <= symbols[-1]:
            raise DataError(f"{path}: symbol {symbol} comes after {symbols[-1]} (bars must be sorted by symbol)")
        step = np.flatnonzero(np.diff(ts) <= 0)
        if step.size:
            raise DataError(f"{path}: {symbol} has a repeated or unsorted timestamp at "
                            f"{pd.Timestamp(ts[step[0] + 1], tz='UTC')}")
        if not (ts.size == index.size and np.array_equal(ts, index)):
            index = np.union1d(index, ts)
        symbols.append(symbol)
        real.append(int(rows["close"].notna().sum()))
    if not symbols or not index.size:
        raise DataError("features: no bars")
    return Scan(path, index, symbols, np.asarray(real))


@dataclass(frozen=True)
class SymbolRows:
    """One symbol's bars placed on the panel's rows, filled as ``tasks/data/bars.py::panel`` fills them."""

    positions: np.ndarray
    """Panel rows of its real bars (those with a close)."""
    own: dict[str, np.ndarray]
    """Its real bars' open/high/low/close/volume (missing open/high/low: the close; missing volume: 0)."""
    close: np.ndarray
    """``[T]`` its last real close (its first before it lists)."""
    open: np.ndarray
    """``[T]`` its open where it has one, else :attr:`close`."""


def symbol_rows(rows: pd.DataFrame, index: np.ndarray) -> SymbolRows:
    """Place ``rows`` (one symbol, sorted by ts) on the panel rows ``index``."""
    at = np.searchsorted(index, ns(rows["ts"]))
    values = {f: rows[f].to_numpy(np.float64) for f in FIELDS if f in rows}
    has = ~np.isnan(values["close"])
    positions, close = at[has], values["close"][has]
    filled = np.full(len(index), np.nan)
    if close.size:
        last = np.cumsum(np.bincount(positions, minlength=len(index))) - 1
        filled = close[np.maximum(last, 0)]
    opened = filled.copy()
    given = ~np.isnan(values["open"])
    opened[at[given]] = values["open"][given]
    own = {"close": close}
    for f in ("open", "high", "low"):
        if f in values:
            own[f] = np.where(np.isnan(values[f][has]), close, values[f][has])
    if "volume" in values:
        own["volume"] = np.where(np.isnan(values["volume"][has]), 0.0, values["volume"][has])
    return SymbolRows(positions, own, filled, opened)


def digest(rows: pd.DataFrame, cuts: list[int]) -> list[str]:
    """Fingerprints of a symbol's bars (ts, open, close) at or before each of the sorted
    ``cuts`` (ns), in one pass: an appended feature set is valid only while the bars it was
    computed from are unchanged."""
    ts = ns(rows["ts"])
    record = np.empty(len(ts), [("ts", np.int64), ("open", np.float64), ("close", np.float64)])
    record["ts"] = ts
    record["open"], record["close"] = rows["open"].to_numpy(np.float64), rows["close"].to_numpy(np.float64)
    h, done, out = hashlib.sha256(), 0, []
    for cut in cuts:
        end = int(np.searchsorted(ts, cut, side="right"))
        h.update(record[done:end].tobytes())
        done = end
        out.append(h.copy().hexdigest())
    return out


class ColumnStore:
    """Per-symbol float64 columns of the panel in a temporary file, symbol-major ``[n, F, T]``:
    each symbol's columns are one sequential write, and :meth:`rows` reads a ``[B, n]`` block
    of one field back, through a mapping that lives only for that read."""

    def __init__(self, path: Path, fields: list[str], symbols: int, rows: int) -> None:
        self.path, self.fields, self.shape = path, fields, (symbols, len(fields), rows)
        self._file: BinaryIO | None = path.open("wb")
        self._written = 0

    def write(self, columns: dict[str, np.ndarray]) -> None:
        """The next symbol's columns (every field, ``[T]`` each)."""
        assert self._file is not None
        np.stack([np.asarray(columns[f], dtype=np.float64) for f in self.fields]).tofile(self._file)
        self._written += 1

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._written != self.shape[0]:
            raise RuntimeError(f"{self.path}: {self._written} of {self.shape[0]} symbols written")

    def discard(self) -> None:
        """Close and delete the file (after the last read, or on an error)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        self.path.unlink(missing_ok=True)

    def rows(self, field: str, a: int, b: int) -> np.ndarray:
        """``[b − a, n]`` C-ordered rows ``a..b−1`` of ``field``."""
        if not self.shape[2]:
            return np.empty((0, self.shape[0]))
        mapped = np.memmap(self.path, np.float64, "r", shape=self.shape)
        out = np.ascontiguousarray(mapped[:, self.fields.index(field), a:b].T)
        del mapped
        return out

    def field(self, name: str) -> FieldRows:
        return FieldRows(self, name)


@dataclass(frozen=True)
class FieldRows:
    """One field of a :class:`ColumnStore` as a ``[T, n]`` panel that slices rows (``risk.Rows``)."""

    store: ColumnStore
    name: str

    def __len__(self) -> int:
        return self.store.shape[2]

    def __getitem__(self, rows: slice) -> np.ndarray:
        a, b, _ = rows.indices(len(self))
        return self.store.rows(self.name, a, b)


class NpyWriter:
    """A ``.npy`` file written row block by row block (plain writes, no mapping): the header
    for the final ``shape`` first, then :meth:`write` appends rows in order."""

    def __init__(self, path: Path, dtype: np.dtype | type, shape: tuple[int, ...]) -> None:
        self.path, self.dtype, self.shape = path, np.dtype(dtype), shape
        self._file = path.open("wb")
        np.lib.format.write_array_header_1_0(self._file, {
            "descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False, "shape": shape})
        self.rows = 0

    def write(self, block: np.ndarray) -> None:
        if block.shape[1:] != self.shape[1:] or block.dtype != self.dtype:
            raise ValueError(f"{self.path}: block {block.dtype}{block.shape} does not fit {self.dtype}{self.shape}")
        np.ascontiguousarray(block).tofile(self._file)
        self.rows += len(block)

    def copy_from(self, old: Path, rows: int) -> None:
        """Append the first ``rows`` rows of the saved array ``old`` (same row shape and dtype), bytes as they are."""
        with old.open("rb") as src:
            shape, dtype = _header(src)
            if tuple(shape[1:]) != self.shape[1:] or dtype != self.dtype or shape[0] < rows:
                raise ValueError(f"{old}: {dtype}{shape} cannot start {self.dtype}{self.shape}")
            size = rows * self.dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64))
            shutil.copyfileobj(_Limited(src, size), self._file, 1 << 24)
        self.rows += rows

    def close(self) -> None:
        self._file.close()
        if self.rows != self.shape[0]:
            raise RuntimeError(f"{self.path}: {self.rows} of {self.shape[0]} rows written")


class _Limited:
    """The next ``size`` bytes of a file, for ``shutil.copyfileobj``."""

    def __init__(self, file: BinaryIO, size: int) -> None:
        self.file, self.left = file, size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        data = self.file.read(n)
        self.left -= len(data)
        return data


def same_rows(old: Path, new: Path) -> bool:
    """Whether the saved array ``new`` starts with every row of ``old``, byte for byte (read in
    chunks: two feature sets at the paper's scale are never in memory at once)."""
    with old.open("rb") as a, new.open("rb") as b:
        (shape_a, dtype_a), (shape_b, dtype_b) = _header(a), _header(b)
        if dtype_a != dtype_b or tuple(shape_a[1:]) != tuple(shape_b[1:]) or shape_a[0] > shape_b[0]:
            return False
        left = int(np.prod(shape_a, dtype=np.int64)) * dtype_a.itemsize
        while left:
            n = min(left, 1 << 24)
            if a.read(n) != b.read(n):
                return False
            left -= n
    return True


def _header(file: BinaryIO) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype of a ``.npy`` file; leaves ``file`` at the start of its data."""
    version = np.lib.format.read_magic(file)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, _, dtype = read(file)
    return tuple(shape), dtype
