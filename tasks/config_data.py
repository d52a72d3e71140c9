"""The ``data:`` section of the one config (tasks/config.py): where stage 1 takes its bars
from, and the range each source brings by default.

Every section of ``params.yaml`` is a :class:`Section`: frozen, and an unknown key is an
error that names it.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from tasks.errors import ConfigError


class Section(BaseModel):
    """A section of ``params.yaml``. A number that is not finite (``nan``, ``inf``, which YAML
    reads as floats) is refused in every field: no setting means one, and a NaN margin or rate
    would turn a decision into a comparison that is always false."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class YahooParams(Section):
    """yfinance: retries with exponential backoff; intraday ranges are chunked to Yahoo's limits."""

    retries: int = Field(3, ge=1)
    backoff_seconds: float = Field(1.0, ge=0.0)
    timeout_seconds: float = Field(10.0, gt=0.0)


class WrdsParams(Section):
    """WRDS PostgreSQL. Credentials come from the environment (``WRDS_USERNAME``,
    ``PGPASSWORD``) or ``~/.pgpass``, never from this file."""

    dataset: Literal["crsp", "taq"] = "crsp"
    host: str = "wrds-pgdata.wharton.upenn.edu"
    port: int = 9737
    dbname: str = "wrds"


class AlpacaParams(Section):
    """Alpaca market data. Keys come from ``APCA_API_KEY_ID`` / ``APCA_API_SECRET_KEY``."""

    data_url: str = "https://data.alpaca.markets"
    feed: Literal["iex", "sip"] = "iex"
    page_limit: int = Field(10_000, ge=1, le=10_000)


SourceName = Literal["synthetic", "file", "yahoo", "wrds", "alpaca", "arch-demo"]

SOURCE_RANGES: dict[str, tuple[date, date]] = {
    "synthetic": (date(2016, 1, 1), date(2023, 12, 31)),
    "arch-demo": (date(1999, 1, 1), date(2018, 12, 31)),
    "yahoo": (date(2016, 1, 1), date(2023, 12, 31)),
    "wrds": (date(2016, 1, 1), date(2023, 12, 31)),
    "alpaca": (date(2016, 1, 1), date(2023, 12, 31)),
}
"""Each source's default ``data.start..data.end``: a range it has data for. arch ships
1999-01-04..2018-12-31; a file has no default (it is imported whole)."""
YAHOO_MINUTE_DAYS = 29
"""Yahoo's 1-minute default: the last 29 days up to yesterday (it keeps about 30)."""


def default_range(source: str, freq: str, today: date | None = None) -> tuple[date, date] | None:
    """The range ``source`` brings when ``data.start`` / ``data.end`` are unset (None: a file,
    imported whole, or an unknown source, which validation then names)."""
    if source == "yahoo" and freq == "1min":
        today = today or datetime.now(timezone.utc).date()
        return today - timedelta(days=YAHOO_MINUTE_DAYS), today - timedelta(days=1)
    return SOURCE_RANGES.get(source)


class DataParams(Section):
    """Where bars come from (stage 1, ingest)."""

    source: SourceName = "synthetic"
    freq: Literal["1d", "1min"] = "1d"
    start: date | None = Field(None, description="first day; unset: the source's default range "
                               "(synthetic 2016-01-01..2023-12-31, arch-demo 1999-01-01..2018-12-31; file: whole file)")
    end: date | None = Field(None, description="last day; unset: the source's default range")
    symbols: int = Field(30, ge=1, le=500, description="synthetic: number of stocks")
    signal: float = Field(0.5, ge=0.0, description="synthetic: learnable structure; 0 = null market")
    martingale: bool = Field(False, description="synthetic 1d at signal 0: every price a martingale (no drift, "
                             "E[next price / price | past] = 1, opens too), so every strategy's true Sharpe is "
                             "buy-and-hold's: the true null where a gate's size is measured (docs/data.md)")
    seed: int = 7
    tickers: list[str] = Field(default_factory=list, description="yahoo / wrds / alpaca: symbols to fetch")
    path: Path | None = Field(None, description="file: a CSV or Parquet file of bars")
    columns: dict[str, str] = Field(
        default_factory=dict, description="file: column in the file -> bars-contract column"
    )
    timezone: str | None = Field(None, description="file: IANA zone of tz-naive intraday timestamps "
                                 "(e.g. America/New_York), converted to UTC; date-only values are sessions")
    yahoo: YahooParams = YahooParams()
    wrds: WrdsParams = WrdsParams()
    alpaca: AlpacaParams = AlpacaParams()

    @model_validator(mode="before")
    @classmethod
    def _source_range(cls, values: Any) -> Any:
        """Fill an unset (or null) start / end from the source's own range, so a
        ``-s data.source=arch-demo`` override gets arch-demo's dates, not another source's."""
        if not isinstance(values, dict):
            return values
        span = default_range(str(values.get("source", "synthetic")), str(values.get("freq", "1d")))
        if span is None:
            return values
        return {**values, **{k: d for k, d in zip(("start", "end"), span, strict=True) if values.get(k) is None}}

    @model_validator(mode="after")
    def _check(self) -> DataParams:
        if self.start is not None and self.end is not None and self.start >= self.end:
            raise ValueError(f"start {self.start} must be before end {self.end}")
        if self.timezone is not None:
            try:
                ZoneInfo(self.timezone)
            except (ZoneInfoNotFoundError, ValueError):
                raise ValueError(f"timezone {self.timezone!r} is not an IANA time zone "
                                 "(e.g. America/New_York)") from None
        if self.source == "file" and self.path is None:
            raise ValueError("path is required when source is 'file'")
        if self.source in ("yahoo", "wrds", "alpaca") and not self.tickers:
            raise ValueError(f"tickers is required when source is '{self.source}'")
        if self.martingale and (self.source != "synthetic" or self.freq != "1d" or self.signal != 0):
            raise ValueError("martingale is for the synthetic daily market at signal 0 (source synthetic, "
                             f"freq 1d, signal 0; got {self.source}, {self.freq}, signal {self.signal})")
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Leave ``martingale`` out while it is off, so the default section dumps (and hashes:
        the ingest stage's ``spec_hash``, the manifest) exactly as before the setting existed."""
        dumped: dict[str, Any] = handler(self)
        if not self.martingale:
            dumped.pop("martingale", None)
        return dumped

    def span(self) -> tuple[date, date]:
        """``start..end`` of a synthetic or fetched source (set from the source's range when unset)."""
        if self.start is None or self.end is None:
            raise ConfigError(f"data.start and data.end are needed for source {self.source}")
        return self.start, self.end
