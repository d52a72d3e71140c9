"""Benchmark of the local paper broker (tasks/delivery/broker): orders/s through alpaca-py, one
trading-loop cycle, and the start time of ``podracer broker``.

1. **orders/s**: 16 threads in this process, each with its own alpaca-py ``TradingClient``,
   submit market orders (1 share, the 30 symbols in turn) to a broker serving in a
   separate process (this script with ``--serve``: a fresh simulated ``PaperBroker`` in a
   ``BrokerServer`` on a 30-symbol daily bars file made here; stopped by PID), so server
   and clients do not share one interpreter. A warm-up, then a fixed count; orders/s =
   count / wall seconds, and the p50/p99 of one ``submit_order`` as a client sees it.
   Twice: the simulated market open (a market order fills at once) and closed (it is
   queued, ``accepted``, for the next open, as the trading loop's orders are). Each
   process's CPU per order comes from ``/proc``.
2. **one trading-loop cycle for 30 symbols**: see ``benchmarks/perf/broker_cycle.py``.
3. **``podracer broker`` start time** (``benchmarks/perf/broker_start.py``): the CLI spawned on a free port
   over the bars of 1.
   (a fresh ledger each time); seconds from spawn until ``GET /v2/clock`` answers 200.
4. **one trading-loop cycle for 100 symbols at minute cadence**: the same as 2. on a tiny
   100-symbol pipeline of 1-minute bars (``benchmarks/perf/broker_cycle.py``); ``--minute-only``
   runs this part alone and prints it (not recorded).
5. **the feed's load** (``--feed FILE``, alone, not recorded): seconds and this process's peak
   RSS to read a validated minute file into the broker's feed, as a trailing window of
   ``--feed-sessions`` sessions (``broker.feed_sessions``; 0: the whole file).

Where the cycle's time goes is split by the calls it makes; where the start time goes, by
``python -X importtime`` (printed only when the 5 s target is missed).

Prints the tables and records them in docs/benchmarks.md, the section's latest reading and a row
of its history (not with ``--quick``).

    .venv/bin/python -m benchmarks.perf.broker --shared        # about 6 minutes on 2 shared cores
    .venv/bin/python -m benchmarks.perf.broker --quick         # about 1.5 minutes; not appended
    .venv/bin/python -m benchmarks.perf.broker --minute-only --cycles 100   # part 4 alone; not appended
    .venv/bin/python -m benchmarks.perf.broker --feed data/validated/bars.parquet   # part 5 alone
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import ROOT, Reading, commit, now, record
from benchmarks.perf.broker_cycle import (
    MINUTE,
    MINUTE_SYMBOLS,
    OUTPUT_SCALE,
    build_pipeline,
    measure_cycles,
    measure_feed,
    measure_minute,
    quantiles,
)
from benchmarks.perf.broker_start import import_profile, start_times, stop
from tasks.settings import load_env_defaults

load_env_defaults()

SYMBOLS, CLIENTS, CASH, COST = 30, 16, 1e9, 0.001
KEY_ID, SECRET = "PKBENCHBROKER0000001", "bench-secret-0123456789abcdefghijklmnopq"
TARGETS = {"orders": 500.0, "cycle_ms": 250.0, "start_s": 5.0, "minute_cycle_ms": 1000.0}
TARGET = "orders >= 500/s (16 alpaca-py clients), p99 trading-loop cycle <= 250 ms (30 symbols), " \
         "`podracer broker` answering within 5 s, p99 cycle <= 1 s at minute cadence (100 symbols); 2 CPU cores"


# --- the market --------------------------------------------------------------------------
def write_market(path: Path, symbols: int = SYMBOLS) -> None:
    """Two years of synthetic daily bars of ``symbols`` stocks on the NYSE calendar."""
    import pandas as pd

    from tasks.data.bars import write_parquet
    from tasks.data.synthetic_daily import daily_market

    market = daily_market(symbols, date(2022, 1, 3), date(2023, 12, 29), signal=0.0, seed=0)
    steps = len(market.sessions)
    frame = pd.DataFrame({"symbol": np.repeat(market.names, steps), "ts": np.tile(market.sessions, symbols),
                          **{f: getattr(market, f).ravel(order="F") for f in ("open", "high", "low", "close",
                                                                               "volume")}})
    write_parquet(frame, path, "1d")


# --- 1. orders/s: the broker in a process of its own ------------------------------------------
def open_account(folder: Path, phase: str, name: str) -> Any:
    """A fresh simulated account on ``folder``'s bars, two bars before the end, the market
    ``open`` (a market order fills at once) or closed (it waits for the next open)."""
    from tasks.delivery.broker.feed import load_feed
    from tasks.delivery.broker.paper import PaperBroker

    bars, db = folder / "bars.parquet", folder / f"{name}.db"
    for stale in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        stale.unlink(missing_ok=True)
    broker = PaperBroker.open(db, bars, initial_cash=CASH, cost_pct=COST, mode="simulated",
                              start=load_feed(bars).times[-3].date())
    if phase == "open":
        broker.advance("open")
    return broker


def serve(folder: Path, phase: str) -> None:
    """``--serve``: a fresh account on ``folder``'s bars, served until SIGTERM; prints its URL."""
    from tasks.delivery.broker.accounts import Exchange
    from tasks.delivery.broker.service import BrokerServer
    from tasks.delivery.keys import load_keys

    broker = open_account(folder, phase, f"served-{phase}")
    keys = load_keys(folder / "unused-keys.json")  # the environment's (APCA_API_KEY_ID / _SECRET_KEY)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with BrokerServer(Exchange(broker, keys)) as server:  # one account: the exchange's main
        print(server.url, flush=True)
        while not stop.wait(0.2):
            pass


@contextmanager
def broker_process(folder: Path, phase: str) -> Iterator[tuple[str, int]]:
    """The ``--serve`` launcher in a child process: (its URL, its PID); stopped by PID at the end."""
    env = {**os.environ, "APCA_API_KEY_ID": KEY_ID, "APCA_API_SECRET_KEY": SECRET}
    command = [sys.executable, "-m", "benchmarks.perf.broker", "--serve", str(folder), phase]
    child = subprocess.Popen(command, stdout=subprocess.PIPE,
                             text=True, env=env, cwd=ROOT)
    try:
        assert child.stdout is not None
        url = child.stdout.readline().strip()
        if not url.startswith("http://"):
            raise SystemExit(f"the broker process did not start (exit code {child.wait()})")
        yield url, child.pid
    finally:
        stop(child)


def cpu_seconds(pid: int) -> float:
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def send_requests(url: str, count: int, warmup: int, clients: int = CLIENTS) -> dict[str, float]:
    """``count`` market orders of 1 share from ``clients`` threads, each with its own alpaca-py
    ``TradingClient``, after ``warmup``: orders/s and one submission's latency."""
    from alpaca.trading.client import TradingClient
    from alpaca.trading.enums import OrderSide, TimeInForce
    from alpaca.trading.requests import MarketOrderRequest

    names = [f"SYN{i:03d}" for i in range(SYMBOLS)]

    def sender() -> Callable[[int], None]:
        client = TradingClient(KEY_ID, SECRET, url_override=url)
        return lambda i: client.submit_order(MarketOrderRequest(
            symbol=names[i % SYMBOLS], qty=1, side=OrderSide.BUY, time_in_force=TimeInForce.DAY))

    senders = [sender() for _ in range(clients)]
    latencies: list[list[float]] = [[] for _ in range(clients)]
    spans: list[tuple[float, float]] = [(0.0, 0.0)] * clients
    errors: list[BaseException] = []
    barrier = threading.Barrier(clients)

    def work(k: int) -> None:
        try:
            send = senders[k]
            for i in range(k, warmup, clients):
                send(i)
            barrier.wait()
            began = time.perf_counter()
            for i in range(warmup + k, warmup + count, clients):
                sent = time.perf_counter()
                send(i)
                latencies[k].append(time.perf_counter() - sent)
            spans[k] = (began, time.perf_counter())
        except BaseException as err:  # noqa: BLE001  (reported below)
            errors.append(err)
            barrier.abort()

    threads = [threading.Thread(target=work, args=(k,)) for k in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise SystemExit(f"a request failed: {errors[0]!r}")
    wall = max(e for _, e in spans) - min(b for b, _ in spans)
    p50, p99 = quantiles([x for lat in latencies for x in lat])
    return {"count": count, "wall_s": wall, "rate": count / wall, "p50_ms": p50 * 1e3, "p99_ms": p99 * 1e3}


def measure_orders(folder: Path, phase: str, count: int, warmup: int) -> dict[str, float]:
    """Requests/s against a fresh broker process, with each process's CPU milliseconds per request."""
    with broker_process(folder, phase) as (url, pid):
        client_cpu, server_cpu = time.process_time(), cpu_seconds(pid)
        result = send_requests(url, count, warmup)
        result["client_cpu_ms"] = (time.process_time() - client_cpu) / (count + warmup) * 1e3
        result["server_cpu_ms"] = (cpu_seconds(pid) - server_cpu) / (count + warmup) * 1e3
    return result


# --- the report -------------------------------------------------------------------------------
def verdict(ok: bool) -> str:
    return "yes" if ok else "**no**"


def minute_rows(cycle: dict[str, Any]) -> list[str]:
    """Part 4's rows: the cycle at minute cadence, 100 symbols."""
    p50, p99 = cycle["loop"]
    return [f"| trading-loop cycle at minute cadence, {MINUTE_SYMBOLS} symbols, p50 / p99 (the loop's own time) | "
            f"{p50:.0f} / {p99:.0f} ms ({cycle['cycles']} cycles, {cycle['decided']} of them decisions, "
            f"{cycle['orders']:.1f} orders each) | p99 ≤ 1 s | "
            f"{verdict(p99 <= TARGETS['minute_cycle_ms'])} |",
            f"| … the cycle including the advance to the next minute's open, p50 / p99 | {cycle['with_open'][0]:.0f} / "
            f"{cycle['with_open'][1]:.0f} ms | | |"]


def table(orders: dict[str, dict[str, float]], cycle: dict[str, Any], starts: list[dict[str, float]],
          minute: dict[str, Any] | None = None) -> str:
    lines = ["| measure | result | target | met |", "|---|---|---|---|"]
    for phase, what in (("open", "market open: each fills at once"), ("closed", "market closed: each queued")):
        r = orders[phase]
        lines.append(f"| orders/s, {CLIENTS} alpaca-py clients, {what} | {r['rate']:,.0f} ({r['count']:,} in "
                     f"{r['wall_s']:.1f} s) | ≥ 500 | {verdict(r['rate'] >= TARGETS['orders'])} |")
        lines.append(f"| … one submission's latency p50 / p99 | {r['p50_ms']:.0f} / {r['p99_ms']:.0f} ms | | |")
        lines.append(f"| … CPU per order, client / broker process | {r['client_cpu_ms']:.2f} / "
                     f"{r['server_cpu_ms']:.2f} ms | | |")
    p50, p99 = cycle["loop"]
    lines.append(f"| trading-loop cycle, {SYMBOLS} symbols, p50 / p99 (the loop's own time) | {p50:.0f} / {p99:.0f} ms "
                 f"({cycle['cycles']} cycles, {cycle['orders']:.1f} orders each) | p99 ≤ 250 ms | "
                 f"{verdict(p99 <= TARGETS['cycle_ms'])} |")
    for key, what in (("open", "… the advance to the open inside it (`after_submit`: the batch fills)"),
                      ("with_open", "… the cycle including that advance"),
                      ("close", "advance to the close after the cycle (not in the cycle's time)")):
        lines.append(f"| {what}, p50 / p99 | {cycle[key][0]:.0f} / {cycle[key][1]:.0f} ms | | |")
    lines.append(f"| first cycle (loads the champion from MLflow) | {cycle['cold_ms']:,.0f} ms | | |")
    if minute is not None:
        lines += minute_rows(minute)
    total = [s["total"] for s in starts]
    lines.append(f"| `podracer broker` until /v2/clock answers 200, min / median of {len(starts)} | "
                 f"{min(total):.2f} / {statistics.median(total):.2f} s | < 5 s | "
                 f"{verdict(statistics.median(total) < TARGETS['start_s'])} |")
    lines.append(f"| … until its port takes a connection / the first answer itself, median | "
                 f"{statistics.median(s['listening'] for s in starts):.2f} / "
                 f"{statistics.median(s['answer'] for s in starts):.2f} s | | |")
    return "\n".join(lines)


def cycle_table(cycle: dict[str, Any]) -> str:
    total = sum(cycle["parts"].values())
    lines = ["| where a cycle's own time goes | calls per cycle | mean ms | share |", "|---|---|---|---|"]
    lines += [f"| {k} | {cycle['calls'][k]:.1f} | {v:.1f} | {v / total:.0%} |" if cycle["calls"][k] else
              f"| {k} | | {v:.1f} | {v / total:.0%} |" for k, v in cycle["parts"].items()]
    return "\n".join(lines)


def imports_line(imports: dict[str, Any]) -> str:
    heavy = ", ".join(f"{name} {sec:.1f} s" + (f" (via `{via}`)" if via else "") for sec, name, via in imports["heavy"])
    return (f"A fresh interpreter spends {imports['total']:.1f} s importing `flows.cli` and "
            f"`tasks.delivery.broker.service` (`-X importtime`; heaviest first imports, cumulative: {heavy}).")


def reading(orders: dict[str, dict[str, float]], cycle: dict[str, Any], starts: list[dict[str, float]],
            imports: dict[str, Any] | None, minute: dict[str, Any]) -> str:
    """One paragraph on what the numbers say, from the numbers."""
    opened, closed = orders["open"], orders["closed"]
    p50, p99 = cycle["loop"]
    top = list(cycle["parts"].items())[:2]
    median = statistics.median(s["total"] for s in starts)
    return (f"{CLIENTS} alpaca-py clients get {opened['rate']:,.0f} orders/s through the paper broker with the "
            f"market open and {closed['rate']:,.0f} with it closed; the broker process spends "
            f"{opened['server_cpu_ms']:.1f} / {closed['server_cpu_ms']:.1f} ms of CPU per order (one uvicorn event "
            f"loop serves them in turn) and the client process {opened['client_cpu_ms']:.1f} / "
            f"{closed['client_cpu_ms']:.1f} ms, both on the same two cores. A trading-loop cycle for {SYMBOLS} "
            f"symbols takes {p50:.0f} ms at the median and {p99:.0f} ms at p99 of its own time; the largest parts "
            f"are {top[0][0]} ({top[0][1]:.0f} ms) and {top[1][0]} ({top[1][1]:.0f} ms) on average. At minute "
            f"cadence, {MINUTE_SYMBOLS} symbols, a cycle takes {minute['loop'][0]:.0f} ms at the median and "
            f"{minute['loop'][1]:.0f} ms at p99. "
            f"`podracer broker` answers {median:.1f} s after it is spawned (median)."
            + (" " + imports_line(imports) if imports else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=2000, help="timed orders per run (after the warm-up)")
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--cycles", type=int, default=100, help="timed trading-loop cycles")
    parser.add_argument("--starts", type=int, default=3, help="starts of `podracer broker`")
    parser.add_argument("--quick", action="store_true", help="300 orders, 15 cycles, 1 start; "
                        "not appended to the docs")
    parser.add_argument("--shared", action="store_true", help="note that the machine was shared with other jobs "
                        "(timings provisional)")
    parser.add_argument("--minute-only", action="store_true", help=f"only part 4: the cycle at minute cadence, "
                        f"{MINUTE_SYMBOLS} symbols (--cycles of them); printed, not recorded")
    parser.add_argument("--feed", type=Path, help="only part 5: load this validated bars file into a feed")
    parser.add_argument("--feed-sessions", type=int, default=20, help="part 5's window in sessions (0: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--serve", nargs=2, metavar=("FOLDER", "PHASE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(Path(args.serve[0]), args.serve[1])
        return
    if args.quick:
        args.orders, args.warmup, args.cycles, args.starts = min(args.orders, 300), min(args.warmup, 50), \
            min(args.cycles, 15), 1
    threads = os.environ.get("OMP_NUM_THREADS", "unset")
    print(f"OMP_NUM_THREADS={threads}; {os.cpu_count()} CPUs", flush=True)
    if args.feed:
        print(measure_feed(args.feed, args.feed_sessions or None))
        return
    if args.minute_only:
        with tempfile.TemporaryDirectory(prefix="bench-broker-") as tmp:
            minute = measure_minute(Path(tmp), args.cycles)
        text = "\n".join(["| measure | result | target | met |", "|---|---|---|---|", *minute_rows(minute)]) \
            + "\n\n" + cycle_table(minute)
        print("\n" + text)  # the full run records part 4 in the broker section
        return
    with tempfile.TemporaryDirectory(prefix="bench-broker-") as tmp:
        root = Path(tmp)
        market = root / "market"
        market.mkdir()
        write_market(market / "bars.parquet")
        orders = {}
        for phase in ("open", "closed"):
            orders[phase] = measure_orders(market, "open" if phase == "open" else "close", args.orders, args.warmup)
            print(f"alpaca, market {phase}: {orders[phase]}", flush=True)
        began = time.perf_counter()
        params = build_pipeline(root / "pipeline", SYMBOLS)
        print(f"pipeline built in {time.perf_counter() - began:.0f} s", flush=True)
        cycle = measure_cycles(params, args.cycles)
        print(f"cycles: { {k: v for k, v in cycle.items() if k != 'parts'} }", flush=True)
        minute = measure_minute(root, args.cycles)
        starts = start_times(root / "start", market / "bars.parquet", args.starts)
        print(f"podracer broker starts: {starts}", flush=True)
        slow = statistics.median(s["total"] for s in starts) >= TARGETS["start_s"]
        imports = import_profile() if slow else None
    text = table(orders, cycle, starts, minute)
    extra = "\n\n" + cycle_table(cycle) + "\n\nAt minute cadence:\n\n" + cycle_table(minute)
    note = "\n\n" + reading(orders, cycle, starts, imports, minute)
    print("\n" + text + extra + note)
    if args.quick:
        print("\n(--quick: not recorded in docs)")
        return
    stamp = now()
    command = " ".join(([f"OMP_NUM_THREADS={threads}"] if threads != "unset" else [])
                       + [".venv/bin/python", "-m", "benchmarks.perf.broker", *sys.argv[1:]])
    shared = ", shared with another job while this ran (timings provisional)" if args.shared else ""
    met = [r["rate"] >= TARGETS["orders"] for r in orders.values()] + [
        cycle["loop"][1] <= TARGETS["cycle_ms"], statistics.median(s["total"] for s in starts) < TARGETS["start_s"],
        minute["loop"][1] <= TARGETS["minute_cycle_ms"]]
    record(Reading(
        "broker", "Paper broker: orders/s through alpaca-py, trading-loop cycle, start time",
        f"Command: `{command}`  \n"
        f"Machine: {os.cpu_count()} CPUs{shared}, {platform.machine()}, Python {platform.python_version()}, "
        f"OMP_NUM_THREADS={threads}. Target: {TARGET}.  \n"
        f"Orders: {CLIENTS} threads with a `TradingClient` each, market orders of 1 share, the broker in a "
        f"process of its own (uvicorn, one event loop, a fresh simulated account per run), "
        f"{args.warmup} warm-up orders, then {args.orders:,}. Cycle: `TradingLoop.cycle` of a tiny "
        f"{SYMBOLS}-symbol champion (its output layer scaled x{OUTPUT_SCALE:g} so that it trades) in an "
        f"MLflow run, risk checks shadowed, as `podracer trade --replay` runs it, the broker in a thread "
        f"of the same process; the clock's advance to the open (where the orders fill) is timed apart "
        f"from the loop's own time, the advance to the close outside the cycle; at minute cadence the same on a "
        f"tiny {MINUTE_SYMBOLS}-symbol pipeline of 1-minute bars ({', '.join(MINUTE)}). Start: `podracer broker "
        f"-p params.yaml --port N` on the same bars, a fresh ledger each time.\n\n{text}{extra}{note}",
        ("date", "commit", "command", "orders/s, market open / closed", "cycle p50 / p99 (the loop's own time)",
         "`podracer broker` start, median", "targets met"),
        (stamp, commit(), f"`{command}`", f"{orders['open']['rate']:,.0f} / {orders['closed']['rate']:,.0f}",
         f"{cycle['loop'][0]:.0f} / {cycle['loop'][1]:.0f} ms",
         f"{statistics.median(s['total'] for s in starts):.2f} s",
         f"{sum(met)} of {len(met)}")), args.out)


if __name__ == "__main__":
    main()
