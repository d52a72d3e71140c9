"""Benchmark of the WRDS TAQ adapter: client memory and time as the range of trades grows.

A throwaway local PostgreSQL (standins/postgres.py) is filled with generated TAQ-like
trades (10 symbols, 200,000 trades a day, so 1 M trades per 5 days), and the adapter
builds their minute bars in SQL (docs/data.md, sources, WRDS). Each reading runs in a
fresh subprocess, so its peak RSS is its own:

- ``stream``: :meth:`WrdsSource.stream` consumed chunk by chunk, each chunk dropped (what a
  per-symbol writer does); its memory should not grow with the range;
- ``fetch``: :meth:`WrdsSource.fetch`, the whole range's bars as one frame (what the ingest
  stage calls); it holds the bars, so it grows with them, never with the trades.

The table is printed and becomes the latest reading of its section of docs/benchmarks.md.

    .venv/bin/python -m benchmarks.perf.wrds              # 1 M and 4 M trades
    .venv/bin/python -m benchmarks.perf.wrds --millions 1 4 16
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import pandas as pd

from benchmarks.common import ROOT, Reading, commit, now, record
from standins.postgres import PostgresServer, seed_taq_bulk, throwaway_postgres

SYMBOLS = tuple(f"S{i}" for i in range(9)) + ("BRK.B",)
PER_DAY = 200_000
DAYS_PER_MILLION = 5
MODES = ("stream", "fetch")


def rss_mib() -> float:
    """This process's resident set now (Linux /proc)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def run_child(mode: str, host: str, port: int, dbname: str, start: date, end: date) -> dict[str, float]:
    """Read the bars of ``start..end`` once (called in a subprocess) and measure it."""
    from tasks.config_data import WrdsParams
    from tasks.data.sources import Request
    from tasks.data.sources.wrds import WrdsSource

    src = WrdsSource(WrdsParams(dataset="taq", host=host, port=port, dbname=dbname))
    request = Request(SYMBOLS, start, end, "1min")
    base = rss_mib()
    began = time.perf_counter()
    if mode == "stream":
        bars = chunks = 0
        for chunk in src.stream(request):
            bars, chunks = bars + len(chunk), chunks + 1
    else:
        bars, chunks = len(src.fetch(request)), 0
    wall = time.perf_counter() - began
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"bars": bars, "chunks": chunks, "wall_s": wall, "base_mib": base, "peak_mib": peak}


def measure(server: PostgresServer, mode: str, start: date, end: date) -> dict[str, float]:
    cmd = [sys.executable, "-m", "benchmarks.perf.wrds", "--child", mode, server.host, str(server.port), server.dbname,
           str(start), str(end)]
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **server.env()}, check=False,
                          cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"{mode} {start}..{end} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(rows: list[dict[str, float | str]]) -> str:
    lines = ["| trades | days | mode | queries | minute bars | wall s | trades/s | RSS after imports MiB "
             "| peak RSS MiB | peak − imports MiB |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        queries = str(r["chunks"]) if r["mode"] == "stream" else "-"
        lines.append(f"| {r['trades']:,} | {r['days']} | {r['mode']} | {queries} | {r['bars']:,} | "
                     f"{r['wall_s']:.1f} | {float(r['trades']) / float(r['wall_s']):,.0f} | {r['base_mib']:.0f} | "
                     f"{r['peak_mib']:.0f} | {float(r['peak_mib']) - float(r['base_mib']):.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--millions", type=int, nargs="+", default=[1, 4], help="trades, in millions, per reading")
    parser.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        mode, host, port, dbname, start, end = args.child
        print(json.dumps(run_child(mode, host, int(port), dbname, date.fromisoformat(start), date.fromisoformat(end))))
        return
    sizes = sorted(set(args.millions))
    days = list(pd.bdate_range("2019-01-02", periods=DAYS_PER_MILLION * sizes[-1]).date)
    rows: list[dict[str, float | str]] = []
    with throwaway_postgres() as server:
        seeded = 0
        for size in sizes:
            wanted = DAYS_PER_MILLION * size
            seed_taq_bulk(server, SYMBOLS, days[seeded:wanted], PER_DAY, first_index=seeded)
            seeded = wanted
            for mode in MODES:
                result = measure(server, mode, days[0], days[wanted - 1])
                rows.append({"trades": wanted * PER_DAY, "days": wanted, "mode": mode, **result})
                print(f"{size} M {mode}: {result['wall_s']:.1f} s, peak {result['peak_mib']:.0f} MiB", file=sys.stderr)
    text = table(rows)
    print(text)
    command = ".venv/bin/python -m benchmarks.perf.wrds" + "".join(f" --millions {m}" for m in sizes if sizes != [1, 4])
    stamp = now()
    streamed = [r for r in rows if r["mode"] == "stream"]
    record(Reading(
        "wrds", "WRDS TAQ to minute bars: the client's memory as the range grows",
        f"Command: `{command}` (a throwaway local PostgreSQL, trades generated in it)  \n"
        f"Machine: {os.cpu_count()} CPUs. Target: the client's peak memory stays flat as the range grows.\n\n{text}",
        ("date", "commit", "command", "stream: peak above imports, MiB, by trades"),
        (stamp, commit(), f"`{command}`",
         ", ".join(f"{int(r['trades']):,}: {float(r['peak_mib']) - float(r['base_mib']):.0f}" for r in streamed))))


if __name__ == "__main__":
    main()
