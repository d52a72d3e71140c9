"""WRDS source: CRSP daily bars and TAQ bars built in SQL, over WRDS PostgreSQL (docs/data.md, sources).

Connection. The ``wrds`` package's :class:`wrds.Connection`, configured only through its
documented keywords (``wrds_hostname``, ``wrds_port``, ``wrds_dbname``, ``wrds_username``,
``wrds_connect_args``) with ``autoconnect=False``. Its own ``connect()`` is not used: when the
first attempt fails it retries against the public WRDS host and then prompts on stdin for a
username and password (and offers to write ``~/.pgpass``), which hangs or crashes without a
terminal. :class:`_QuietConnection` makes exactly one attempt through the package's own
engine builder (same URL, ``AUTOCOMMIT``, connect args) and raises on failure.

Credentials come from the environment only: the username from ``WRDS_USERNAME`` (or
``PGUSER``); the password from ``PGPASSWORD``, else libpq reads ``PGPASSFILE`` or
``~/.pgpass``. The password goes to libpq as a connect argument, never into the URL, a log
line, params or an error message. SSL is ``sslmode=require``, the package's default
(``PGSSLMODE`` overrides it).

Datasets. ``crsp``: daily bars from ``crsp.dsf`` joined to ``crsp.stocknames`` (ticker →
permno over the name's date range), close = ``abs(prc)`` (a negative prc is the bid/ask
average). ``taq``: bars aggregated in SQL from the daily trade tables
``taqm_YYYY.ctm_YYYYMMDD``, regular trades only (``tr_corr = '00'``) in 09:30 <= time < 16:00
New York, stamped in UTC.

Streaming. TAQ holds tens of millions of trades a day, so trades never reach the client:
the server aggregates them, and the client reads bars one chunk at a time, a chunk being
up to ``symbols_per_query`` symbols (in sorted order) × ``days_per_query`` trade tables.
One query per chunk (a UNION ALL of one GROUP BY per day table) returns at most
symbols × days × 390 minute bars, so the client's memory is bounded by the chunk, not the
range (:meth:`WrdsSource.stream`; measured in docs/data.md, sources, WRDS).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import sqlalchemy as sa
import wrds
import wrds.sql

from tasks.config_data import WrdsParams
from tasks.data.bars import to_contract
from tasks.data.sources import Request, SourceError
from tasks.errors import DataError

log = logging.getLogger("podracer.sources.wrds")

DATASETS = ("crsp", "taq")
CONNECT_TIMEOUT_S = 15
PRICE_COLUMNS = ("open", "high", "low", "close", "volume")

CRSP_SQL = """
SELECT s.ticker AS symbol, d.permno, d.date::timestamp AS ts,
       d.openprc AS open, d.askhi AS high, d.bidlo AS low, abs(d.prc) AS close, d.vol AS volume
FROM crsp.dsf AS d
JOIN crsp.stocknames AS s
  ON s.permno = d.permno AND d.date BETWEEN s.namedt AND s.nameenddt
WHERE s.ticker = ANY(%(symbols)s)
  AND s.namedt <= %(end)s AND s.nameenddt >= %(start)s
  AND d.date BETWEEN %(start)s AND %(end)s
ORDER BY s.ticker, d.date, d.permno
"""

TABLES_SQL = """
SELECT n.nspname AS schema_name, c.relname AS table_name,
       EXISTS (SELECT 1 FROM pg_catalog.pg_attribute AS a
               WHERE a.attrelid = c.oid AND a.attname = 'tr_seqnum' AND NOT a.attisdropped) AS has_seqnum
FROM pg_catalog.pg_class AS c
JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
WHERE n.nspname = ANY(%(schemas)s) AND c.relname = ANY(%(tables)s)
  AND c.relkind IN ('r', 'v', 'm', 'f', 'p')
  AND has_schema_privilege(n.oid, 'USAGE') AND has_table_privilege(c.oid, 'SELECT')
"""

SYMBOLS_PER_QUERY = 10
DAYS_PER_QUERY = 5
"""Default chunk: 10 symbols × 5 trading days, at most 19,500 minute bars per query."""

# freq -> (bucket of a trade, bar timestamp from the bucket). Minute buckets are New York
# wall-clock times, converted to UTC; daily bars are stamped at the session date 00:00 UTC.
TAQ_BUCKETS = {
    "1min": ("date_trunc('minute', date + time_m)", "(bucket AT TIME ZONE 'America/New_York') AT TIME ZONE 'UTC'"),
    "1d": ("date::timestamp", "bucket"),
}

# One day table's bars: open/close are the first/last trade by time, then tr_seqnum where
# the table has it ({seq} is NULL otherwise, and same-instant trades then tie).
TAQ_DAY_SQL = """
SELECT symbol, bucket,
       (array_agg(price ORDER BY time_m, seq))[1] AS open,
       max(price) AS high,
       min(price) AS low,
       (array_agg(price ORDER BY time_m DESC, seq DESC))[1] AS close,
       sum(size) AS volume
FROM (SELECT CASE WHEN coalesce(sym_suffix, '') = '' THEN sym_root
                  ELSE sym_root || '.' || sym_suffix END AS symbol,
             {bucket} AS bucket, time_m, {seq} AS seq, price, size
      FROM "{schema}"."{table}"
      WHERE sym_root = ANY(%(roots)s)
        AND tr_corr = '00'
        AND time_m >= TIME '09:30' AND time_m < TIME '16:00') AS trades
WHERE symbol = ANY(%(symbols)s)
GROUP BY symbol, bucket
"""

TAQ_SQL = "SELECT symbol, {ts} AS ts, open, high, low, close, volume FROM (\n{days}) AS bars"


@dataclass(frozen=True)
class _DayTable:
    """One day's TAQ trade table, and whether it has the sequence number that orders ties."""

    day: date
    schema: str
    table: str
    has_seqnum: bool


class _Failure(Exception):
    """Internal: a reason that :meth:`WrdsSource.fetch` turns into a SourceError."""


@dataclass(frozen=True)
class _Credentials:
    """Who connects and how; the password is kept out of repr and logs."""

    user: str
    password: str | None = field(repr=False)
    passfile: str | None
    sslmode: str

    def connect_args(self) -> dict[str, Any]:
        """libpq keywords: the wrds package defaults plus sslmode, timeout and the secret."""
        args: dict[str, Any] = {**wrds.sql.WRDS_CONNECT_ARGS, "sslmode": self.sslmode,
                                "connect_timeout": CONNECT_TIMEOUT_S}
        if self.password:
            args["password"] = self.password
        if self.passfile:
            args["passfile"] = self.passfile
        return args


def _credentials(env: Mapping[str, str]) -> _Credentials:
    """Username, password / password file and sslmode from ``env`` (never from params)."""
    user = env.get("WRDS_USERNAME") or env.get("PGUSER")
    if not user:
        raise _Failure("no WRDS username: set WRDS_USERNAME (password via PGPASSWORD or ~/.pgpass)")
    passfile = env.get("PGPASSFILE") or (str(Path(env["HOME"]) / ".pgpass") if env.get("HOME") else None)
    return _Credentials(user, env.get("PGPASSWORD") or None, passfile, env.get("PGSSLMODE") or "require")


class _QuietConnection(wrds.Connection):  # type: ignore[misc]
    """A ``wrds.Connection`` that tries the configured server once and never prompts."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(autoconnect=False, verbose=False, **kwargs)

    def connect(self) -> None:
        """One attempt through the package's engine builder; raise instead of falling back
        to the public WRDS host or asking for credentials on stdin."""
        self._Connection__make_sa_engine_conn(raise_err=True)

    def _Connection__get_user_credentials(self) -> tuple[str, str]:
        """Never prompt (the package calls this to ask on stdin)."""
        raise _Failure("WRDS credentials missing or rejected (no interactive prompt)")


def _detail(exc: BaseException, secret: str | None) -> str:
    """First line of the driver's message, whitespace-collapsed, with the password masked."""
    orig = getattr(exc, "orig", None) or exc
    lines = [" ".join(line.split()) for line in str(orig).splitlines() if line.strip()]
    text = lines[0] if lines else type(orig).__name__
    return text.replace(secret, "***") if secret else text


@contextmanager
def _connect(params: WrdsParams, creds: _Credentials) -> Iterator[_QuietConnection]:
    """An open wrds connection for the duration of the block; connect failures are _Failure."""
    where = f"{params.host}:{params.port}/{params.dbname} as {creds.user}"
    conn = _QuietConnection(wrds_hostname=params.host, wrds_port=params.port, wrds_dbname=params.dbname,
                            wrds_username=creds.user, wrds_connect_args=creds.connect_args())
    log.info("wrds: connecting to %s (sslmode=%s)", where, creds.sslmode)
    try:
        conn.connect()
    except (sa.exc.SQLAlchemyError, OSError, ValueError) as exc:
        raise _Failure(f"cannot connect to {where}: {_detail(exc, creds.password)}") from None
    try:
        yield conn
    finally:
        conn.close()


def _read(conn: _QuietConnection, query: str, params: dict[str, Any], secret: str | None) -> pd.DataFrame:
    """Run ``query`` through ``wrds.Connection.raw_sql``; a database error is _Failure."""
    try:
        return conn.raw_sql(query, params=params, chunksize=None)
    except sa.exc.SQLAlchemyError as exc:
        raise _Failure(f"query failed: {_detail(exc, secret)}") from None


def _crsp_daily(conn: _QuietConnection, request: Request, secret: str | None = None) -> pd.DataFrame:
    """Daily bars from crsp.dsf for the request's tickers; a ticker that several permnos
    share on one day (share classes) keeps the lowest permno, with a warning."""
    params = {"symbols": list(request.symbols), "start": request.start, "end": request.end}
    frame = _read(conn, CRSP_SQL, params, secret)
    dup = frame.duplicated(["symbol", "ts"], keep="first")
    if dup.any():
        log.warning("wrds crsp: %s map to several permnos on %d day(s); kept the lowest permno",
                    ", ".join(sorted(frame.loc[dup, "symbol"].unique())), int(dup.sum()))
    return frame.loc[~dup].drop(columns="permno")


def _taq_days(conn: _QuietConnection, request: Request, secret: str | None) -> list[_DayTable]:
    """The day tables of the range that exist and are readable, in date order."""
    days = [request.start + timedelta(days=i) for i in range((request.end - request.start).days + 1)]
    wanted = [(d, f"taqm_{d:%Y}", f"ctm_{d:%Y%m%d}") for d in days]
    found = _read(conn, TABLES_SQL, {"schemas": sorted({s for _, s, _ in wanted}),
                                     "tables": [t for _, _, t in wanted]}, secret)
    present = {(s, t): bool(q) for s, t, q in zip(found["schema_name"], found["table_name"], found["has_seqnum"])}
    kept = [_DayTable(d, s, t, present[(s, t)]) for d, s, t in wanted if (s, t) in present]
    log.info("wrds taq: %d of %d day(s) in range have a trade table", len(kept), len(days))
    return kept


def _taq_query(tables: list[_DayTable], freq: str) -> str:
    """One chunk's query: the day tables' bars (TAQ_DAY_SQL) joined by UNION ALL."""
    bucket, ts = TAQ_BUCKETS[freq]
    days = "UNION ALL\n".join(
        TAQ_DAY_SQL.format(bucket=bucket, seq="tr_seqnum" if t.has_seqnum else "NULL::bigint",
                           schema=t.schema, table=t.table) for t in tables)
    return TAQ_SQL.format(ts=ts, days=days)


def _taq_chunks(conn: _QuietConnection, request: Request, secret: str | None,
                symbols_per_query: int, days_per_query: int) -> Iterator[pd.DataFrame]:
    """Bars at ``request.freq`` aggregated in SQL, one query per (symbol group, day chunk):
    symbols in sorted order, each group's days in date order; days without a table are skipped."""
    tables = _taq_days(conn, request, secret)
    if not tables:
        raise _Failure("no TAQ trade tables (taqm_YYYY.ctm_YYYYMMDD) for any day in the range")
    symbols = sorted(request.symbols)
    for i in range(0, len(symbols), symbols_per_query):
        group = symbols[i : i + symbols_per_query]
        params = {"roots": sorted({s.split(".", 1)[0] for s in group}), "symbols": group}
        for j in range(0, len(tables), days_per_query):
            chunk = tables[j : j + days_per_query]
            frame = _read(conn, _taq_query(chunk, request.freq), params, secret)
            log.debug("wrds taq: %s %s..%s gave %d bar(s)", ",".join(group), chunk[0].day, chunk[-1].day, len(frame))
            yield frame


def _coerce(frame: pd.DataFrame, origin: str) -> pd.DataFrame:
    """Stamp ts as UTC and coerce one chunk to the bars contract."""
    frame = frame.assign(ts=pd.to_datetime(frame["ts"]).dt.tz_localize("UTC"))
    for col in PRICE_COLUMNS:
        frame[col] = pd.to_numeric(frame[col]).astype("float64")
    try:
        return to_contract(frame, origin)
    except DataError as exc:
        raise _Failure(str(exc)) from None


class WrdsSource:
    """WRDS PostgreSQL: ``crsp`` daily bars or ``taq`` bars built from trades (see module doc)."""

    name = "wrds"
    default_symbols: tuple[str, ...] = ()

    def __init__(self, params: WrdsParams, env: Mapping[str, str] | None = None, *,
                 symbols_per_query: int = SYMBOLS_PER_QUERY, days_per_query: int = DAYS_PER_QUERY) -> None:
        """``env`` supplies credentials (defaults to ``os.environ``, read at fetch time); the
        two sizes bound a TAQ query's result (module doc, streaming)."""
        if symbols_per_query < 1 or days_per_query < 1:
            raise ValueError("symbols_per_query and days_per_query must be >= 1")
        self.params = params
        self._env = env
        self.symbols_per_query, self.days_per_query = symbols_per_query, days_per_query

    def __repr__(self) -> str:
        p = self.params
        return f"WrdsSource(dataset={p.dataset!r}, server={p.host}:{p.port}/{p.dbname})"

    def fetch(self, request: Request) -> pd.DataFrame:
        """Bars for ``request`` in the bars contract, or a one-line SourceError (bad dataset or
        frequency, no credentials, connection or auth failure, SQL error, no rows, missing symbols)."""
        frames = list(self.stream(request))
        return pd.concat(frames, ignore_index=True).sort_values(["symbol", "ts"], kind="stable", ignore_index=True)

    def stream(self, request: Request) -> Iterator[pd.DataFrame]:
        """The bars of ``request`` one chunk at a time, each in the bars contract (CRSP: one
        chunk; TAQ: one per query, module doc). The checks that need the whole range (no
        rows, a symbol missing) raise their SourceError after the last chunk."""
        try:
            yield from self._stream(request)
        except _Failure as exc:
            raise SourceError(self.name, request, str(exc)) from None

    def _stream(self, request: Request) -> Iterator[pd.DataFrame]:
        dataset = self.params.dataset
        if dataset not in DATASETS:
            raise _Failure(f"unknown dataset {dataset!r} (expected one of {', '.join(DATASETS)})")
        if request.freq not in TAQ_BUCKETS:
            raise _Failure(f"unsupported frequency {request.freq!r}")
        if dataset == "crsp" and request.freq != "1d":
            raise _Failure("dataset crsp has daily bars only (use dataset taq for 1min)")
        if not request.symbols or request.end < request.start:
            raise _Failure("empty request (no symbols, or end before start)")
        creds = _credentials(self._env if self._env is not None else os.environ)
        seen: set[str] = set()
        with _connect(self.params, creds) as conn:
            if dataset == "crsp":
                frames: Iterator[pd.DataFrame] = iter([_crsp_daily(conn, request, creds.password)])
            else:
                frames = _taq_chunks(conn, request, creds.password, self.symbols_per_query, self.days_per_query)
            for frame in frames:
                if not frame.empty:
                    seen.update(frame["symbol"])
                    yield _coerce(frame, f"wrds {dataset}")
        if not seen:
            raise _Failure("no rows for these symbols and dates")
        missing = [s for s in request.symbols if s not in seen]
        if missing:
            raise _Failure(f"symbol(s) not found: {', '.join(missing)}")
