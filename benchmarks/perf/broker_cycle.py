"""Parts 2 and 4 of benchmarks/perf/broker.py: one trading-loop cycle, timed and split by the calls it makes,
for 30 symbols on daily bars and for 100 symbols at minute cadence.

A tiny pipeline (ingest to register, the smallest training that makes a model) in a temp
folder, its policy the champion, a simulated-clock broker started in a thread of this
process standing 120 bars before the end; ``TradingLoop.cycle(t)`` inside an MLflow run
(logging each cycle as the live loop does) over consecutive bars. The clock's advance to
the open (``after_submit``: the batch fills) is timed apart from the loop's own time, the
advance to the close outside the cycle; the first cycle (it loads the champion) is reported
alone. On minute bars (:data:`MINUTE`: six weeks, the last one the test window) the tiny
policy decides on every bar (``env.decide_every`` 1): the worst case of ``podracer trade`` on a
minute feed, where the held bars between two decisions trade only the gate and close-outs.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

OUTPUT_SCALE = 300.0
MINUTE = ("data.freq=1min", "data.start=2023-10-02", "data.end=2023-11-10", "features.train_end=2023-10-27",
          "features.val_end=2023-11-03", "features.turbulence_refresh=390")
"""The minute case's data: six weeks of 1-minute bars (about 15,000 bars a symbol)."""


def quantiles(values: list[float]) -> tuple[float, float]:
    """p50 and p99 (linear interpolation)."""
    return float(np.percentile(values, 50)), float(np.percentile(values, 99))


def sharpen(weights: Path, factor: float = OUTPUT_SCALE) -> None:
    """Scale the policy's output layer by ``factor``: one generation of one iteration leaves
    it near its initialisation (actions ~ 0.002: no whole shares), so the champion would
    never trade; scaled, its actions depend on the bar and it buys and sells."""
    import torch

    state = torch.load(weights, weights_only=True)
    last = max((k for k in state if k.endswith(".weight")), key=lambda k: int(k.split(".")[-2]))
    for key in (last, last.replace(".weight", ".bias")):
        state[key] = state[key] * factor
    torch.save(state, weights)


def build_pipeline(root: Path, symbols: int, minute: bool = False) -> Any:
    """A ``symbols``-symbol tiny pipeline in ``root`` (on :data:`MINUTE` bars with ``minute``), its
    policy registered as champion."""
    from benchmarks.common import build_features
    from standins.tiny import tiny_params
    from tasks.model import bundle
    from tasks.model.backtest import backtest
    from tasks.model.train import train
    from tasks.registry.register import register

    params = tiny_params(root, f"data.symbols={symbols}", "evolution.population=2", "evolution.generations=1",
                         "evolution.iterations_per_generation=1", "registry.gate_margin=-1000",
                         "trade.fill_timeout_seconds=1", "trade.poll_seconds=0.05", *(MINUTE if minute else ()))
    build_features(params)
    train(params)
    sharpen(params.dirs.models / bundle.WEIGHTS)
    backtest(params)
    if not register(params).promoted:
        raise SystemExit("register did not promote the new version (gate_margin=-1000 should)")
    return params


class Split:
    """Seconds and calls per label, added up by the wrappers of :meth:`wrap`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def wrap(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[label] += time.perf_counter() - began
                self.calls[label] += 1
        return timed

    def take(self) -> tuple[dict[str, float], dict[str, int]]:
        out = dict(self.seconds), dict(self.calls)
        self.seconds, self.calls = defaultdict(float), defaultdict(int)
        return out


def measure_cycles(params: Any, cycles: int) -> dict[str, Any]:
    """``cycles`` consecutive cycles after one cold one; latencies and where the time goes."""
    import pandas as pd

    from tasks.data import feature_set
    from tasks.delivery.client.journal import Journal
    from tasks.delivery.client.local import local_broker
    from tasks.delivery.client.loop import TradingLoop
    from tasks.delivery.client.replay import advance
    from tasks.delivery.client.session import log_cycle, mlflow_run, trading_client
    from tasks.delivery.keys import local_keys

    stamps = feature_set.load(params.dirs.features).timestamps
    first = len(stamps) - max(120, cycles + 2)
    keys = local_keys(params)
    split = Split()
    load = feature_set.load
    feature_set.load = split.wrap("feature_set.load (the feature set from disk)", load)  # the loop looks it up there
    loop_ms, open_ms, close_ms = [], [], []
    parts: list[dict[str, float]] = []
    calls: list[dict[str, int]] = []
    with local_broker(params, ledger=params.dirs.broker / "bench.db", clock="simulated",
                      day=pd.Timestamp(stamps[first], tz="UTC").to_pydatetime()) as url, \
            mlflow_run(params, "benchmark broker", url):
        client = trading_client(keys, url)  # as a trading session builds it
        for name in ("get_clock", "get_account", "get_all_positions", "get_orders", "submit_order",
                     "get_order_by_id"):
            setattr(client, name, split.wrap(f"alpaca-py {name}", getattr(client, name)))
        journal = Journal.of(client, params.dirs.broker / "bench-journal.db")
        journal.cycles = split.wrap("journal read (SQLite)", journal.cycles)  # type: ignore[method-assign]
        journal.put = split.wrap("journal write (SQLite)", journal.put)  # type: ignore[method-assign]
        loop = TradingLoop(params, client, journal, split.wrap("MLflow metrics (log_cycle)", log_cycle),
                           enforce_risk=False)
        loop._due = split.wrap("decision schedule (_due: the journal's last decision)",  # type: ignore[method-assign]
                               loop._due)
        loop.policy.current = split.wrap("resolve champion (MLflow registry)",  # type: ignore[method-assign]
                                         loop.policy.current)
        opened = lambda: advance(url, keys, "open")  # noqa: E731
        began = time.perf_counter()
        loop.cycle(first, after_submit=split.wrap("advance to the open (fills)", opened))
        cold = time.perf_counter() - began
        advance(url, keys, "close")
        model = loop.policy.model
        model.predict = split.wrap("policy (pyfunc predict)", model.predict)
        orders = decided = 0
        split.take()
        for t in range(first + 1, first + 1 + cycles):
            began = time.perf_counter()
            result = loop.cycle(t, after_submit=split.wrap("advance to the open (fills)", opened))
            total = time.perf_counter() - began
            part, count = split.take()
            opening = part.pop("advance to the open (fills)")
            loop_ms.append((total - opening) * 1e3)
            open_ms.append(opening * 1e3)
            part["other (loop's own Python)"] = total - opening - sum(part.values())
            parts.append(part)
            calls.append(count)
            orders += len(result.orders)
            decided += result.decided
            began = time.perf_counter()
            advance(url, keys, "close")
            close_ms.append((time.perf_counter() - began) * 1e3)
    feature_set.load = load
    mean = {k: statistics.fmean(p.get(k, 0.0) for p in parts) * 1e3 for k in {k for p in parts for k in p}}
    per_cycle = {k: statistics.fmean(c.get(k, 0) for c in calls) for k in mean}
    return {"cycles": cycles, "cold_ms": cold * 1e3, "loop": quantiles(loop_ms), "open": quantiles(open_ms),
            "close": quantiles(close_ms), "with_open": quantiles([a + b for a, b in zip(loop_ms, open_ms)]),
            "orders": orders / cycles, "decided": decided, "parts": dict(sorted(mean.items(), key=lambda kv: -kv[1])),
            "calls": per_cycle}


MINUTE_SYMBOLS = 100
"""Symbols of the minute-cadence cycle (benchmarks/perf/broker.py, part 4)."""


def measure_feed(path: Path, sessions: int | None) -> str:
    """Part 5: one load of ``path`` into the broker's feed; its seconds and this process's peak RSS."""
    import resource

    from tasks.delivery.broker.feed import load_feed

    began = time.perf_counter()
    feed = load_feed(path, sessions)
    took = time.perf_counter() - began
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return (f"feed of {path}: {len(feed):,} bars x {len(feed.symbols)} symbols ({feed.freq}, window "
            f"{sessions or 'all'} sessions) in {took:.1f} s; peak RSS of this process {peak:,.0f} MiB")


def measure_minute(root: Path, cycles: int) -> dict[str, Any]:
    """Part 4: a tiny 100-symbol minute pipeline in ``root``, then ``cycles`` cycles on its last bars."""
    began = time.perf_counter()
    params = build_pipeline(root / "minute", MINUTE_SYMBOLS, minute=True)
    print(f"minute pipeline built in {time.perf_counter() - began:.0f} s", flush=True)
    cycle = measure_cycles(params, cycles)
    print(f"minute cycles: { {k: v for k, v in cycle.items() if k != 'parts'} }", flush=True)
    return cycle
