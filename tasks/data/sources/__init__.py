"""Market-data sources behind one interface (docs/data.md, sources and the bars contract).

Every adapter turns a :class:`Request` into a frame in the bars contract
(:func:`tasks.data.bars.to_contract`) or raises :class:`SourceError`, whose one-line message
names the source, the symbols and the range.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Literal, Protocol

import pandas as pd

from tasks.errors import DataError

Freq = Literal["1d", "1min"]


@dataclass(frozen=True)
class Request:
    """Bars wanted: ``symbols`` from ``start`` to ``end`` inclusive, at ``freq``."""

    symbols: tuple[str, ...]
    start: date
    end: date
    freq: Freq

    def describe(self) -> str:
        shown = ", ".join(self.symbols[:5]) + (f" +{len(self.symbols) - 5} more" if len(self.symbols) > 5 else "")
        return f"symbols {shown}, {self.start}..{self.end}, {self.freq}"


class SourceError(DataError):
    """A source could not deliver the requested bars."""

    def __init__(self, source: str, request: Request, reason: str) -> None:
        super().__init__(f"{source}: {reason} ({request.describe()})")
        self.source, self.request, self.reason = source, request, reason


class Source(Protocol):
    """What every adapter provides."""

    name: str
    default_symbols: tuple[str, ...]
    """Symbols fetched when ``data.tickers`` is empty (empty where tickers are required)."""

    def fetch(self, request: Request) -> pd.DataFrame:
        """Bars for ``request`` in the bars contract, or raise :class:`SourceError`."""
        ...
