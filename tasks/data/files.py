"""Bar files as people have them (``data.source: file``; docs/data.md, "Files").

**Formats**, chosen by the name of ``data.path``:

* ``.csv`` (also ``.tsv``, ``.txt``), ``.csv.gz`` / ``.gz``, ``.csv.zst`` / ``.zst`` (zstd through
  pyarrow, no extra package) and ``.zip`` holding exactly one CSV;
* ``.parquet`` / ``.pq``, or a folder of Parquet files (a partitioned dataset such as
  ``symbol=AAPL/part-0.parquet``; partition columns become ordinary columns).

**CSV text** as downloads write it: UTF-8 with or without a byte-order mark; ``,``, ``;``, tab
or ``|`` between fields (sniffed from the header line); ``null`` / ``NaN`` / ``N/A`` / empty for
a missing value (validation quarantines the row); thousands separators (``"1,234,567"``);
decimal commas (``101,25``) in ``;``-separated files, where ``.`` then groups thousands; and a
header line repeated inside the file (concatenated exports), which is dropped and logged. A
``;``-, tab- or ``|``-separated file whose numbers do not show one decimal mark (a ``.`` decimal
point beside a comma, or only ``1.234``-like and ``30,860``-like cells, which read either way)
is refused, naming one cell of each kind (:func:`decimal_comma`): guessing would misread every
number.

**Timestamps** (``ts``), the date rule:

* date-only values (``2021-03-04``; more exactly, zone-less values all at midnight) are
  **session dates at 00:00 UTC**, as the synthetic market and the sources write daily bars;
* values with a zone or offset (``Z``, ``-05:00``, offsets that change across DST) are
  converted to UTC; but in **daily** bars, values all at midnight in the zone they carry
  (yfinance's ``Ticker.history()`` writes ``2020-01-02 00:00:00-05:00``) are that date's session,
  at 00:00 UTC, not the UTC instant (which falls at 05:00 of that day);
* zone-less values with a time of day are read in ``data.timezone`` (an IANA zone, e.g.
  ``America/New_York``) and converted to UTC. Without that setting they are refused, because
  the same wall-clock time is a different instant in New York and in UTC;
* numbers (Excel serial days? epoch seconds?) and slash dates (``3/4/2021``: March 4 or
  April 3?) are refused rather than guessed, and so are Parquet timestamps outside the years
  1677..2262 that pandas can hold (a typo'd year 0221).

Anything refused is one :class:`DataError` line that names the file and, where one exists,
the line (CSV, the header being line 1) or row (Parquet) and the column.
"""

from __future__ import annotations

import gzip
import io
import logging
import re
import zipfile
import zlib
from pathlib import Path
from zoneinfo import ZoneInfo

import pandas as pd
import pyarrow as pa

from tasks.config import DataParams
from tasks.data.bars import COLUMNS, PRICE_COLUMNS, to_contract
from tasks.errors import DataError

log = logging.getLogger("podracer.ingest")

CSV_SUFFIXES = (".csv", ".tsv", ".txt")
PARQUET_SUFFIXES = (".parquet", ".pq")
SUPPORTED = ".csv, .csv.gz, .csv.zst, .zip with one CSV, .parquet, or a folder of Parquet files"
NULLS = ["", "null", "NULL", "Null", "NaN", "nan", "N/A", "n/a", "#N/A", "None"]
"""Cell texts read as missing values (Yahoo writes ``null``); ``NA`` is not one: it can be a ticker."""
DELIMITERS = (",", ";", "\t", "|")
NUMERIC = (*PRICE_COLUMNS, "volume")
ZONE = re.compile(r"\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?\s?(?:[zZ]|[+-]\d{2}(?::?\d{2})?)$")
"""A timestamp text whose time of day ends in a zone: ``Z`` or a UTC offset (``2021-01-07`` has none)."""
OFFSET = re.compile(r"\s?(?:[zZ]|[+-]\d{2}(?::?\d{2})?)$")
"""The zone at the end of a :data:`ZONE` text; what is left is its wall-clock time in that zone."""
SLASH_DATE = re.compile(r"^\d{1,2}[/.]\d{1,2}[/.]\d{2,4}\b")
PLAIN_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?$")
THOUSANDS = {",": re.compile(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$"), ".": re.compile(r"^-?\d{1,3}(?:\.\d{3})+(?:,\d+)?$")}


class _Where:
    """Names a row of the file in messages: the CSV line (header = line 1) or the Parquet row;
    ``sep`` is the CSV's field separator (None for Parquet)."""

    def __init__(self, sep: str | None = None) -> None:
        self.sep = sep

    def __call__(self, label: object) -> str:
        return f"line {int(label) + 2}" if self.sep else f"row {int(label) + 1}"  # type: ignore[call-overload]


def read_bars(data: DataParams) -> pd.DataFrame:
    """The bars of ``data.path`` in the bars contract, kept to ``data.start..data.end`` when set.

    Raises one-line :class:`DataError`s as the module docstring lists. Value problems (a
    null, a zero price, high < low) are left for validation to quarantine, row by row.
    """
    assert data.path is not None
    path = Path(data.path)
    frame, where = _read(path)
    origin = str(path)
    if frame.empty:
        raise DataError(f"{origin}: no rows (the file has a header but no bars)")
    frame = _rename(frame, data.columns, origin)
    comma = decimal_comma(frame, origin, where)
    for column in NUMERIC:
        frame[column] = _numbers(frame[column], column, origin, where, comma)
    frame["ts"] = parse_ts(frame["ts"], origin, data.timezone, where, daily=data.freq == "1d")
    frame = _within(frame, data, origin)
    return to_contract(frame, origin)


def _read(path: Path) -> tuple[pd.DataFrame, _Where]:
    """The file as a frame (CSV cells as text; repeated header lines dropped)."""
    if not path.exists():
        raise DataError(f"{path}: no such file")
    name = path.name.lower()
    try:
        if path.is_dir():
            return _read_parquet_folder(path), _Where()
        if name.endswith(PARQUET_SUFFIXES):
            return pd.read_parquet(path), _Where()
        if name.endswith(CSV_SUFFIXES):
            return _read_csv(path.read_bytes(), path)
        if name.endswith(".gz"):
            with gzip.open(path) as stream:
                return _read_csv(stream.read(), path)
        if name.endswith((".zst", ".zstd")):
            with pa.input_stream(str(path), compression="zstd") as stream:
                return _read_csv(stream.read(), path)
        if name.endswith(".zip"):
            return _read_csv(_one_csv_in_zip(path), path)
    except DataError:
        raise
    except (OSError, EOFError, ValueError, zlib.error, zipfile.BadZipFile, pa.ArrowException, RuntimeError) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise DataError(f"{path}: unreadable ({first})") from None
    raise DataError(f"{path}: unsupported file type (use {SUPPORTED})")


def _read_parquet_folder(path: Path) -> pd.DataFrame:
    if not any(p.suffix.lower() in PARQUET_SUFFIXES for p in path.rglob("*") if p.is_file()):
        raise DataError(f"{path}: a folder without Parquet files (a partitioned dataset holds *.parquet)")
    frame = pd.read_parquet(path)
    for column in frame.columns:  # partition columns arrive as categoricals
        if isinstance(frame[column].dtype, pd.CategoricalDtype):
            frame[column] = frame[column].astype(str)
    return frame


def _one_csv_in_zip(path: Path) -> bytes:
    with zipfile.ZipFile(path) as archive:
        members = [m for m in archive.infolist() if not m.is_dir() and not m.filename.startswith("__MACOSX/")
                   and not Path(m.filename).name.startswith(".")]
        csvs = [m for m in members if m.filename.lower().endswith(CSV_SUFFIXES)]
        if len(csvs) != 1:
            names = ", ".join(m.filename for m in (csvs or members)[:5]) or "nothing"
            what = f"{len(csvs)} CSV files ({names})" if csvs else f"no CSV file (it holds {names})"
            raise DataError(f"{path}: a zip must hold exactly one CSV, this one holds {what}; "
                            "unzip it and set data.path to one file")
        return archive.read(csvs[0])


def _read_csv(raw: bytes, path: Path) -> tuple[pd.DataFrame, _Where]:
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise DataError(f"{path}: not UTF-8 text") from None
    if not text.strip():
        raise DataError(f"{path}: empty file")
    header = next(line for line in text.splitlines() if line.strip())
    sep = max(DELIMITERS, key=header.count) if any(d in header for d in DELIMITERS) else ","
    try:
        frame = pd.read_csv(io.StringIO(text), sep=sep, dtype=str, keep_default_na=False, na_values=NULLS,
                            skipinitialspace=True)
    except pd.errors.ParserError as exc:
        raise DataError(f"{path}: not a table ({str(exc).splitlines()[0]})") from None
    frame.columns = [str(c).strip() for c in frame.columns]
    where = _Where(sep)
    if len(frame.columns):
        candidates = frame[frame.iloc[:, 0].str.strip() == frame.columns[0]]
        names = pd.Series(frame.columns, index=frame.columns)
        repeated = candidates.index[(candidates.apply(lambda col: col.str.strip()) == names).all(axis=1)]
        if len(repeated):
            log.warning("%s: dropped %d repeated header line(s), the first at %s", path, len(repeated),
                        where(repeated[0]))
            frame = frame.drop(index=repeated)
    return frame, where


def _rename(frame: pd.DataFrame, columns: dict[str, str], origin: str) -> pd.DataFrame:
    frame = frame.rename(columns=columns)
    twice = sorted({c for c in frame.columns if list(frame.columns).count(c) > 1})
    if twice:
        raise DataError(f"{origin}: more than one column is named {twice[0]} (check data.columns)")
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        found = ", ".join(map(str, frame.columns[:10])) + (" ..." if len(frame.columns) > 10 else "")
        raise DataError(f"{origin}: missing column(s) {', '.join(missing)} (the file has {found}; "
                        "map them with data.columns)")
    return frame


SEPARATOR_NAMES = {";": "semicolon", "\t": "tab", "|": "pipe"}


def decimal_comma(frame: pd.DataFrame, origin: str, where: _Where) -> bool:
    """Whether the numbers of a ``;``-, tab- or ``|``-separated CSV use decimal commas (with
    ``.`` grouping thousands), or a one-line DataError when their cells do not say.

    A comma in a number is read as a decimal comma there (docs/data.md, files). That reading
    is refused when a cell without a comma has a ``.`` that cannot group thousands (``100.2155``:
    a decimal point), or when every comma could be a US thousands separator (``30,860``)
    while cells with only a ``.`` exist (``100.216``): 100216 and 30.86, or 100.216 and 30860?
    The message names the file, the line, the column and both cells.
    """
    if where.sep in (None, ","):
        return False
    texts = {c: frame[c].astype("string").str.strip() for c in NUMERIC if frame[c].dtype == object}
    if not texts:
        return False
    cells = pd.concat(texts).dropna()
    commas = cells[cells.str.contains(",", regex=False)]
    if commas.empty:
        return False
    dots = cells[cells.str.contains(".", regex=False) & ~cells.str.contains(",", regex=False)]
    points = dots[~dots.str.match(THOUSANDS["."])]  # "1.5", "100.2155": a decimal point, never a grouping
    shown = not commas.str.match(THOUSANDS[","]).all()  # "51,25", "1.234,5": only a decimal comma reads so
    if points.empty and (dots.empty or shown):
        return True
    dot, comma = _first(points if len(points) else dots), _first(commas)
    name = SEPARATOR_NAMES.get(str(where.sep), repr(where.sep))
    raise DataError(f"{origin}: {where(dot[1])}, column {dot[0]}: {dots[dot]!r} and {where(comma[1])}, column "
                    f"{comma[0]}: {commas[comma]!r} disagree on the decimal mark (a {name}-separated file reads "
                    "',' as a decimal comma and '.' as a thousands separator); write the numbers without thousands "
                    "separators, or save the file comma-separated")


def _first(cells: pd.Series) -> tuple[str, object]:
    """The (column, row label) of the cell of ``cells`` on the earliest line."""
    return min(cells.index, key=lambda key: (key[1], NUMERIC.index(key[0])))


def _numbers(col: pd.Series, name: str, origin: str, where: _Where, decimal_comma: bool) -> pd.Series:
    """``col`` as float64, or a one-line error naming the first cell that is not a number.

    With ``decimal_comma`` (a ``;``-, tab- or ``|``-separated file with commas in its numbers)
    ``1.234,5`` is 1234.5 and a ``.`` always groups thousands; otherwise ``"1,234,567"`` is
    1234567 (a comma followed by groups of three digits) and any other comma is refused.
    """
    if pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col):
        return col.astype("float64")
    text = col.astype("string").str.strip()
    if decimal_comma:
        grouped = text.str.match(THOUSANDS["."]).fillna(False)
        fixed = text.where(~grouped, text.str.replace(".", "", regex=False)).str.replace(",", ".", regex=False)
        values = pd.to_numeric(fixed, errors="coerce")
    else:
        values = pd.to_numeric(text, errors="coerce")
    bad = values.isna() & text.notna()
    if bad.any() and not decimal_comma:
        grouped = text.str.match(THOUSANDS[","]).fillna(False)
        values = pd.to_numeric(text.where(~grouped, text.str.replace(",", "", regex=False)), errors="coerce")
        bad = values.isna() & text.notna()
    if bad.any():
        label = bad.idxmax()
        raise DataError(f"{origin}: {where(label)}, column {name}: {text[label]!r} is not a number")
    return values.astype("float64")


def parse_ts(col: pd.Series, origin: str, timezone: str | None, where: _Where, daily: bool = False) -> pd.Series:
    """``col`` as tz-aware UTC timestamps by the date rule (module docstring); nulls stay NaT.
    ``daily``: the bars are daily, so zoned values all at midnight of their zone are sessions."""
    if isinstance(col.dtype, pd.DatetimeTZDtype) or pd.api.types.is_datetime64_dtype(col):
        _in_range(col, origin, where)
    if isinstance(col.dtype, pd.DatetimeTZDtype):
        return _sessions(col.dt.tz_localize(None), col) if daily else col.dt.tz_convert("UTC")
    if pd.api.types.is_datetime64_dtype(col):
        return _naive(col, origin, timezone, where)
    text = col.astype("string").str.strip()
    present = text.dropna()
    if present.empty:
        return pd.Series(pd.NaT, index=col.index, dtype="datetime64[ns, UTC]")
    if pd.api.types.is_numeric_dtype(col) or present.str.match(PLAIN_NUMBER).all():
        raise DataError(f"{origin}: column ts holds numbers ({where(present.index[0])}: {present.iloc[0]!r}), not "
                        "dates (Excel serial days? epoch seconds?); write them as YYYY-MM-DD or ISO-8601 timestamps")
    zoned = present.str.contains(ZONE)
    if zoned.any() and not zoned.all():
        a, b = present.index[zoned.to_numpy()][0], present.index[~zoned.to_numpy()][0]
        raise DataError(f"{origin}: column ts mixes values with a zone ({where(a)}: {present[a]!r}) and without "
                        f"({where(b)}: {present[b]!r})")
    parsed = pd.to_datetime(text, format="ISO8601", utc=bool(zoned.all()), errors="coerce")
    bad = parsed.isna() & text.notna()
    if bad.any():
        label = bad.idxmax()
        value = str(text[label])
        why = ("a slash date is ambiguous (month/day or day/month?)" if SLASH_DATE.match(value)
               else "not an ISO-8601 date or timestamp")
        raise DataError(f"{origin}: {where(label)}, column ts: {value!r}: {why}; write YYYY-MM-DD dates "
                        "or ISO-8601 timestamps")
    if zoned.all() and not daily:  # minute bars: the instants (no second parse of a large file)
        return parsed.dt.tz_convert("UTC")
    if zoned.all():
        wall = pd.to_datetime(text.str.replace(OFFSET, "", regex=True), format="ISO8601", errors="coerce")
        return _sessions(wall, parsed)
    return _naive(parsed, origin, timezone, where)


def _sessions(wall: pd.Series, zoned: pd.Series) -> pd.Series:
    """Zoned timestamps of daily bars in UTC; where their wall-clock times (``wall``, in each
    value's own zone) are all midnights, each value's own date as the session, at 00:00 UTC: a
    New York midnight is that day's session, while its UTC instant (05:00) would be no daily
    bar at all."""
    present = wall.dropna()
    if len(present) and wall.isna().equals(zoned.isna()) and (present == present.dt.normalize()).all():
        return wall.dt.tz_localize("UTC")
    return zoned.dt.tz_convert("UTC")


def _in_range(col: pd.Series, origin: str, where: _Where) -> None:
    """Refuse timestamps outside what pandas holds in nanoseconds (years 1677..2262): Parquet
    stores a typo'd year 0221 in milliseconds, which the bars contract cannot represent."""
    lo, hi = pd.Timestamp.min, pd.Timestamp.max
    if isinstance(col.dtype, pd.DatetimeTZDtype):
        lo, hi = lo.tz_localize("UTC"), hi.tz_localize("UTC")
    bad = col.notna() & ((col < lo) | (col > hi))
    if bad.any():
        label = bad.idxmax()
        raise DataError(f"{origin}: {where(label)}, column ts: {col[label]} is out of range (timestamps must lie "
                        f"in {lo.year}..{hi.year}; a typo in the year?)")


def _naive(ts: pd.Series, origin: str, timezone: str | None, where: _Where) -> pd.Series:
    """Zone-less timestamps: dates are sessions at 00:00 UTC; times of day need ``data.timezone``."""
    present = ts.dropna()
    if (present == present.dt.normalize()).all():
        return ts.dt.tz_localize("UTC")
    if timezone is None:
        label = present.index[(present != present.dt.normalize()).to_numpy()][0]
        raise DataError(f"{origin}: column ts has times of day but no time zone ({where(label)}: {ts[label]}); "
                        "set data.timezone (e.g. America/New_York) or write UTC offsets")
    local = ts.dt.tz_localize(ZoneInfo(timezone), ambiguous="NaT", nonexistent="NaT")
    bad = local.isna() & ts.notna()
    if bad.any():
        label = bad.idxmax()
        raise DataError(f"{origin}: {where(label)}, column ts: {ts[label]} does not exist or is ambiguous in "
                        f"{timezone} (a daylight-saving change)")
    return local.dt.tz_convert("UTC")


def _within(frame: pd.DataFrame, data: DataParams, origin: str) -> pd.DataFrame:
    """Rows inside ``data.start..data.end`` (each end optional); what is left out is logged."""
    if data.start is None and data.end is None:
        return frame
    day = frame["ts"].dt.tz_convert("UTC").dt.tz_localize(None).dt.normalize()
    keep = pd.Series(True, index=frame.index)
    if data.start is not None:
        keep &= day.isna() | (day >= pd.Timestamp(data.start))
    if data.end is not None:
        keep &= day.isna() | (day <= pd.Timestamp(data.end))
    if not keep.any():
        raise DataError(f"{origin}: no bars in data.start..data.end ({data.start}..{data.end}); the file has "
                        f"{day.min().date()}..{day.max().date()}")
    if not keep.all():
        log.info("%s: %d of %d rows lie outside data.start..data.end (%s..%s) and are left out", origin,
                 int((~keep).sum()), len(frame), data.start, data.end)
    return frame[keep]
