"""A throwaway local PostgreSQL cluster for the WRDS adapter's tests and benchmark (standins/__init__.py:
why here), and WRDS-like seed data in it.

:func:`throwaway_postgres` runs ``initdb`` into a temp dir, starts the server on 127.0.0.1
at a free port with SSL on (a self-signed ``openssl`` certificate: the ``wrds`` package
connects with ``sslmode=require`` by default, and the adapter keeps that), creates a
database and a password user (scram-sha-256 over TCP), and stops and deletes it all on exit.
``initdb`` refuses to run as root, so under euid 0 the server runs as the ``postgres`` user.

:func:`seed_wrds` creates CRSP-like (``crsp.dsf``, ``crsp.stocknames``) and TAQ-like
(``taqm_YYYY.ctm_YYYYMMDD``) tables, fills them with generated data and returns exactly what
it inserted, so tests can compute the expected bars independently in pandas.

Missing server binaries raise :class:`PostgresUnavailable` (tests fail, never skip);
``tests/standins/ensure_postgres.sh`` installs them.
"""

from __future__ import annotations

import glob
import io
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import psycopg2
from psycopg2 import sql

HOST = "127.0.0.1"
SUPERUSER = "postgres"


class PostgresUnavailable(RuntimeError):
    """The throwaway cluster could not be created (binaries missing, start failed, ...)."""


@dataclass(frozen=True)
class PostgresServer:
    """A running throwaway cluster: where it listens and who may log in."""

    host: str
    port: int
    dbname: str
    user: str
    password: str = field(repr=False)
    root: Path

    def env(self) -> dict[str, str]:
        """Credentials the way the WRDS adapter reads them (``WRDS_USERNAME``, ``PGPASSWORD``)."""
        return {"WRDS_USERNAME": self.user, "PGPASSWORD": self.password}

    def connect(self) -> psycopg2.extensions.connection:
        """A plain psycopg2 connection as the test user (autocommit), for seeding."""
        conn = psycopg2.connect(host=self.host, port=self.port, dbname=self.dbname, user=self.user,
                                password=self.password, sslmode="require")
        conn.autocommit = True
        return conn


def server_bindir() -> Path:
    """The folder holding ``initdb`` and ``pg_ctl``: ``pg_config --bindir``, Debian's
    ``/usr/lib/postgresql/*/bin`` (newest first) or ``$PATH``; else PostgresUnavailable."""
    candidates: list[Path] = []
    if os.environ.get("PG_BINDIR"):
        candidates.append(Path(os.environ["PG_BINDIR"]))
    if shutil.which("pg_config"):
        done = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=False)
        candidates.append(Path(done.stdout.strip()))
    debian = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name), reverse=True)
    candidates += [Path(p) for p in debian]
    if shutil.which("initdb"):
        candidates.append(Path(shutil.which("initdb") or "").parent)
    for bindir in candidates:
        if (bindir / "initdb").is_file() and (bindir / "pg_ctl").is_file():
            return bindir
    raise PostgresUnavailable("PostgreSQL server binaries (initdb, pg_ctl) not found; "
                              "run tests/standins/ensure_postgres.sh (apt-get install postgresql)")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _owner() -> pwd.struct_passwd | None:
    """The OS user to run the server as: ``postgres`` when we are root, else ourselves (None)."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        raise PostgresUnavailable("running as root but no 'postgres' system user to run initdb as; "
                                  "run tests/standins/ensure_postgres.sh") from None


def _run(cmd: list[str], what: str, cwd: Path, owner: pwd.struct_passwd | None) -> None:
    """Run ``cmd`` (as ``owner`` via runuser when given); a failure is PostgresUnavailable."""
    if owner is not None:
        cmd = ["runuser", "-u", owner.pw_name, "--", *cmd]
    try:
        done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PostgresUnavailable(f"{what} failed: {exc}") from None
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise PostgresUnavailable(f"{what} failed (exit {done.returncode}): {tail}")


def _self_signed_cert(data: Path, owner: pwd.struct_passwd | None) -> None:
    """Write ``server.crt``/``server.key`` into the data dir (key 0600, owned by the server user)."""
    if not shutil.which("openssl"):
        raise PostgresUnavailable("openssl not found (needed for the cluster's SSL certificate); "
                                  "run tests/standins/ensure_postgres.sh")
    key, crt = data / "server.key", data / "server.crt"
    _run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
          "-keyout", str(key), "-out", str(crt), "-days", "2", "-subj", f"/CN={HOST}"], "openssl", data, None)
    for path in (key, crt):
        os.chmod(path, 0o600)
        if owner is not None:
            os.chown(path, owner.pw_uid, owner.pw_gid)


def _configure(data: Path, root: Path, port: int) -> None:
    """Loopback only, our port and socket dir, SSL on, durability off (a test cluster)."""
    settings = {
        "listen_addresses": f"'{HOST}'", "port": str(port), "unix_socket_directories": f"'{root}'",
        "ssl": "on", "ssl_cert_file": "'server.crt'", "ssl_key_file": "'server.key'",
        "fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
        "max_connections": "20", "shared_buffers": "32MB", "TimeZone": "'UTC'",
    }
    with open(data / "postgresql.conf", "a", encoding="utf-8") as conf:
        conf.write("\n# throwaway test cluster\n" + "".join(f"{k} = {v}\n" for k, v in settings.items()))


def _create_user_and_db(root: Path, port: int, dbname: str, user: str, password: str) -> None:
    """As superuser over the Unix socket (trust auth), create the login role and its database."""
    conn = psycopg2.connect(host=str(root), port=port, user=SUPERUSER, dbname="postgres")
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD %s").format(sql.Identifier(user)), (password,))
            cur.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(dbname), sql.Identifier(user)))
    finally:
        conn.close()


@contextmanager
def throwaway_postgres(dbname: str = "wrds", user: str = "podracer") -> Iterator[PostgresServer]:
    """Start a fresh cluster on 127.0.0.1 (SSL on, password auth), yield it, then stop and delete it."""
    bindir, owner = server_bindir(), _owner()
    root = Path(tempfile.mkdtemp(prefix="podracer-pg-"))
    data, port, password = root / "data", free_port(), secrets.token_urlsafe(18)
    if owner is not None:
        os.chown(root, owner.pw_uid, owner.pw_gid)
    started = False
    try:
        _run([str(bindir / "initdb"), "-D", str(data), "-U", SUPERUSER, "--auth-local=trust",
              "--auth-host=scram-sha-256", "--encoding=UTF8", "--locale=C", "--no-sync"], "initdb", root, owner)
        _self_signed_cert(data, owner)
        _configure(data, root, port)
        started = True
        _run([str(bindir / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"), "-w", "-t", "30", "-s",
              "start"], f"pg_ctl start (see {root / 'server.log'})", root, owner)
        _create_user_and_db(root, port, dbname, user, password)
        yield PostgresServer(HOST, port, dbname, user, password, root)
    finally:
        if started:
            subprocess.run([*(["runuser", "-u", owner.pw_name, "--"] if owner else []), str(bindir / "pg_ctl"),
                            "-D", str(data), "-m", "immediate", "-w", "-s", "stop"],
                           cwd=root, capture_output=True, timeout=60, check=False)
        shutil.rmtree(root, ignore_errors=True)


# ---- WRDS-like seed data -------------------------------------------------------------

CRSP_DAYS = pd.bdate_range("2023-12-27", "2024-01-16")
# permno, ticker, namedt, nameenddt: CCC is 10009 until 2024-01-05, then 10003 (was OLD).
STOCKNAMES = [
    (10001, "AAA", "2000-01-01", "2099-12-31"), (10002, "BBB", "2000-01-01", "2099-12-31"),
    (10003, "OLD", "2000-01-01", "2024-01-05"), (10003, "CCC", "2024-01-06", "2099-12-31"),
    (10009, "CCC", "1990-01-01", "2024-01-05"), (10009, "NEWC", "2024-01-06", "2099-12-31"),
    (10004, "DDD", "2000-01-01", "2099-12-31"),
]
TAQ_DAYS = (date(2024, 3, 7), date(2024, 3, 8), date(2024, 3, 11), date(2024, 3, 13))  # no table for 03-12
TAQ_SYMBOLS = (("AAA", None), ("BBB", ""), ("BRK", "B"), ("AAA", "WS"), ("DDD", None))
TRADE_COLUMNS = ("date", "time_m", "ex", "sym_root", "sym_suffix", "tr_scond", "size", "price", "tr_corr", "tr_seqnum")
BOUNDARY_US = (34_200_000_000, 34_199_999_999, 57_599_999_999, 57_600_000_000)  # 09:30, just before, 16:00 edges


@dataclass(frozen=True)
class WrdsSeed:
    """What :func:`seed_wrds` inserted: ``names`` (crsp.stocknames), ``dsf`` (crsp.dsf) and
    ``trades`` (every TAQ trade, ``time_m`` as a timedelta since midnight)."""

    names: pd.DataFrame = field(repr=False)
    dsf: pd.DataFrame = field(repr=False)
    trades: pd.DataFrame = field(repr=False)


def _gen_dsf(rng: np.random.Generator) -> pd.DataFrame:
    """Daily rows for every permno over CRSP_DAYS; ~30% with a negative prc (bid/ask average)."""
    n, rows = len(CRSP_DAYS), []
    for permno in sorted({p for p, *_ in STOCKNAMES}):
        close = 50 * np.exp(np.cumsum(rng.normal(0, 0.02, n)))
        up, down = rng.uniform(0.001, 0.03, (2, n))
        rows.append(pd.DataFrame({
            "permno": permno, "date": CRSP_DAYS.date, "openprc": close * (1 + (up - down) / 2),
            "askhi": close * (1 + up), "bidlo": close * (1 - down),
            "prc": np.where(rng.random(n) < 0.3, -close, close), "vol": rng.integers(1_000, 5_000_000, n) * 1.0}))
    dsf = pd.concat(rows, ignore_index=True).round({"openprc": 4, "askhi": 4, "bidlo": 4, "prc": 4})
    dsf.loc[3, "openprc"] = np.nan  # CRSP has days without an open price
    return dsf


def _corrections(rng: np.random.Generator, n: int) -> np.ndarray:
    """tr_corr codes: ~10% corrected/cancelled, the first four (the boundary times) regular."""
    corr = np.where(rng.random(n) < 0.9, "00", rng.choice(["01", "07", "08", "12"], n))
    corr[:4] = "00"
    return corr


def _gen_trades(rng: np.random.Generator, day: date, n: int = 800) -> pd.DataFrame:
    """One day's trades: mostly near market hours, some pre/post-market, ~10% corrected (tr_corr != '00'),
    boundary times, and duplicated timestamps whose order only tr_seqnum decides."""
    parts = []
    for root, suffix in TAQ_SYMBOLS:
        us = np.where(rng.random(n) < 0.85, rng.integers(33_900, 57_900, n), rng.integers(14_400, 72_000, n))
        us = us * 1_000_000 + rng.integers(0, 1000, n) * 1000
        us[:4] = BOUNDARY_US
        us[4:40:2] = us[5:41:2]  # identical timestamps
        us.sort()
        parts.append(pd.DataFrame({
            "sym_root": root, "sym_suffix": suffix, "time_m": pd.to_timedelta(us, unit="us"),
            "price": np.round(100 * np.exp(np.cumsum(rng.normal(0, 0.001, n))), 2),
            "size": rng.integers(1, 2_000, n), "ex": rng.choice(list("NQTZ"), n),
            "tr_scond": rng.choice(["@", "F", "@ TI", "O", "6"], n),
            "tr_corr": _corrections(rng, n)}))
    trades = pd.concat(parts, ignore_index=True).sort_values("time_m", kind="stable", ignore_index=True)
    trades["tr_seqnum"] = np.arange(1, len(trades) + 1) + 1_000_000
    trades["date"] = day
    return trades.sample(frac=1.0, random_state=int(rng.integers(1 << 31)), ignore_index=True)  # physical order random


def _copy(cur: psycopg2.extensions.cursor, table: str, frame: pd.DataFrame) -> None:
    """Bulk-load ``frame`` into ``table`` with COPY (NULL written as \\N, empty string kept)."""
    buf = io.StringIO()
    frame.to_csv(buf, index=False, header=False, na_rep="\\N")
    buf.seek(0)
    cur.copy_expert(f"COPY {table} ({', '.join(frame.columns)}) FROM STDIN WITH (FORMAT csv, NULL '\\N')", buf)


def _clock(td: pd.Series) -> pd.Series:
    """Timedeltas since midnight as 'HH:MM:SS.ffffff' strings for a TIME column."""
    comp = td.dt.components
    return (comp.hours.map("{:02d}".format) + ":" + comp.minutes.map("{:02d}".format) + ":"
            + comp.seconds.map("{:02d}".format) + "." + (td.dt.microseconds).map("{:06d}".format))


def seed_wrds(server: PostgresServer, seed: int = 7) -> WrdsSeed:
    """Create and fill ``crsp.dsf``, ``crsp.stocknames`` and ``taqm_2024.ctm_YYYYMMDD`` (one table per
    day in TAQ_DAYS) with generated data; return the inserted rows for independent checks."""
    rng = np.random.default_rng(seed)
    names = pd.DataFrame(STOCKNAMES, columns=["permno", "ticker", "namedt", "nameenddt"])
    names["namedt"], names["nameenddt"] = pd.to_datetime(names.namedt).dt.date, pd.to_datetime(names.nameenddt).dt.date
    dsf = _gen_dsf(rng)
    trades = pd.concat([_gen_trades(rng, day) for day in TAQ_DAYS], ignore_index=True)
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE SCHEMA crsp; CREATE SCHEMA taqm_2024;"
                        "CREATE TABLE crsp.stocknames (permno integer, namedt date, nameenddt date, ticker varchar(8));"
                        "CREATE TABLE crsp.dsf (permno integer, date date, openprc numeric(12,4), askhi numeric(12,4),"
                        " bidlo numeric(12,4), prc numeric(12,4), vol double precision);")
            _copy(cur, "crsp.stocknames", names)
            _copy(cur, "crsp.dsf", dsf)
            for day in TAQ_DAYS:
                table = f"taqm_{day:%Y}.ctm_{day:%Y%m%d}"
                cur.execute(f"CREATE TABLE {table} (date date, time_m time, ex varchar(1), sym_root varchar(6),"
                            " sym_suffix varchar(10), tr_scond varchar(4), size integer, price double precision,"
                            " tr_corr varchar(2), tr_seqnum bigint)")
                rows = trades.loc[trades.date == day, list(TRADE_COLUMNS)].assign(time_m=lambda f: _clock(f.time_m))
                _copy(cur, table, rows)
    finally:
        conn.close()
    return WrdsSeed(names=names, dsf=dsf, trades=trades)


# ---- TAQ at volume, generated in the server ------------------------------------------

TAQ_BULK_TABLE = ("CREATE UNLOGGED TABLE {table} (date date, time_m time, ex varchar(1), sym_root varchar(6),"
                  " sym_suffix varchar(10), tr_scond varchar(4), size integer, price double precision,"
                  " tr_corr varchar(2), tr_seqnum bigint)")
# Trade g of a day: symbol (g / 2) % n, so trades 2j and 2j+1 are one symbol at one instant and
# only tr_seqnum (reversed against physical order) orders them; instants spread over
# 09:25-16:05 in 100 ms steps (so some fall outside regular hours); ~9% are corrections.
TAQ_BULK_INSERT = """
INSERT INTO {table} (date, time_m, ex, sym_root, sym_suffix, tr_scond, size, price, tr_corr, tr_seqnum)
SELECT %(day)s::date,
       TIME '09:25' + ((g / 2 * 7919 + %(shift)s) %% 240000) * INTERVAL '100 milliseconds',
       'Q', (%(roots)s::text[])[1 + (g / 2) %% %(n)s], (%(suffixes)s::text[])[1 + (g / 2) %% %(n)s], '@',
       1 + (g * 37) %% 997,
       round(100 + 10 * ((g / 2) %% %(n)s) + ((g * 2654435761) %% 10007) / 100.0, 2)::double precision,
       CASE WHEN g %% 17 = 3 THEN '01' WHEN g %% 29 = 5 THEN '12' ELSE '00' END,
       %(base)s + g + 1 - 2 * (g %% 2)
FROM generate_series(0::bigint, %(count)s - 1) AS g
"""


def seed_taq_bulk(server: PostgresServer, symbols: tuple[str, ...], days: list[date], per_day: int,
                  first_index: int = 0) -> None:
    """Create ``taqm_YYYY.ctm_YYYYMMDD`` for each of ``days`` with ``per_day`` trades spread over
    ``symbols`` (``ROOT`` or ``ROOT.SUFFIX``), generated inside the server with generate_series
    (TAQ_BULK_INSERT), so millions of trades cost no client memory. ``first_index`` numbers
    the first day when a range is seeded in parts. Deterministic: the same arguments give the
    same rows; a test reads back what it checks."""
    roots = [s.split(".", 1)[0] for s in symbols]
    suffixes = [s.split(".", 1)[1] if "." in s else None for s in symbols]
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            for k, day in enumerate(days, start=first_index):
                cur.execute(f"CREATE SCHEMA IF NOT EXISTS taqm_{day:%Y}")
                table = f"taqm_{day:%Y}.ctm_{day:%Y%m%d}"
                cur.execute(TAQ_BULK_TABLE.format(table=table))
                cur.execute(TAQ_BULK_INSERT.format(table=table),
                            {"day": day, "shift": k * 104_729, "roots": roots, "suffixes": suffixes,
                             "n": len(symbols), "count": per_day, "base": k * per_day})
    finally:
        conn.close()
