"""``podracer trade --replay START..END``: the champion trades a window bar by bar on a fresh
paper account, and its equity curve is checked against the backtest's (the parity proof).

A simulated-clock broker over a new ledger (``data/broker/replay.db``) starts at the close
of the bar before ``START``, with the champion's own cash and costs; the loop journals in a
new ``data/broker/replay-journal.db``. The live risk checks are shadowed, not enforced:
what they would block is sent anyway, since the replay's job is to show that serving
equals training, and listed with its bar and reason in ``data/broker/replay/flagged.csv``.
Each cycle decides on bar t and submits; the clock then advances to t+1's open, where the
orders fill as one batch by the env's rule, and to t+1's close, where the account is marked.
With the backtest's window, the paper equity equals ``data/backtest/equity.csv`` to the
cent (docs/delivery.md, Parity), which this checks. On minute bars the same holds bar by
bar: t+1 is the next minute, or the next session's first minute after a session's last.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import requests

from tasks.config import Params
from tasks.data import feature_set
from tasks.delivery.client.bar_keys import bar_key
from tasks.delivery.client.journal import Journal
from tasks.delivery.client.local import local_broker
from tasks.delivery.client.loop import Policy, TradingLoop
from tasks.delivery.client.session import BatchedMetrics, mlflow_run, trading_client
from tasks.delivery.keys import Keys, local_keys
from tasks.errors import ConfigError, DataError
from tasks.model.backtest import CURVE_FILE
from tasks.storage import atomic_dir

log = logging.getLogger("podracer.trade")
REPLAY_DB, REPLAY_JOURNAL = "replay.db", "replay-journal.db"
REPLAY_PLOT, REPLAY_CURVE, REPLAY_FLAGGED = "replay.png", "replay.csv", "flagged.csv"
FLAGGED_COLUMNS = ("bar", "client_order_id", "side", "qty", "symbol", "reason")
CENT = 0.005


@dataclass(frozen=True)
class ReplayResult:
    start: str
    end: str
    """The first and last bars traded, named as the journal names them (a date, or a minute)."""
    bars: int
    final_equity: float
    max_difference: float | None
    """Largest |paper − backtest| over the window, or None when the backtest covers another window."""
    flagged: int
    """Orders the live risk checks would have blocked (a replay sends them, to prove parity)."""
    halts: int
    """Bars on which the daily loss limit would have halted trading (a replay trades on)."""
    plot: Path
    curve: Path
    risk: Path
    """Each of them with its bar and reason (``flagged.csv``; a halt has no order's fields)."""

    @property
    def equal_to_the_cent(self) -> bool:
        return self.max_difference is not None and self.max_difference < CENT


def window(params: Params, spec: str) -> tuple[int, int]:
    """Bar indices of ``START..END`` (dates, inclusive: every minute bar of those sessions) or of
    ``test``; the replay starts one bar earlier."""
    fs = feature_set.load(params.dirs.features)
    days = pd.DatetimeIndex(fs.timestamps).normalize()
    if spec == "test":
        lo, hi = fs.splits["test"]
        return lo, hi
    start, sep, end = spec.partition("..")
    try:
        first, last = date.fromisoformat(start), date.fromisoformat(end) if end else days[-1].date()
    except ValueError:
        raise ConfigError(f"--replay {spec!r}: expected START..END as dates (2023-01-03..2023-12-29) or 'test'")
    lo = int(days.searchsorted(pd.Timestamp(first)))
    hi = int(days.searchsorted(pd.Timestamp(last), side="right")) - 1
    if not sep or lo < 1 or hi <= lo:
        raise DataError(f"--replay {spec}: needs at least two bars inside the features' dates "
                        f"({days[1].date()}..{days[-1].date()}) and one bar before START")
    return lo, hi


def advance(url: str, keys: Keys, to: str, session: requests.Session | None = None) -> None:
    """Move the simulated broker's clock to the next ``open`` or ``close``; ``session`` keeps
    one connection for a replay's thousands of moves."""
    response = (session or requests).post(f"{url}/podracer/v1/clock/advance", params={"to": to}, timeout=60,
                                          headers=keys.headers())
    if response.status_code != 200:
        raise DataError(f"replay: the broker could not advance its clock ({response.text[:200]})")


def replay(params: Params, spec: str = "test") -> ReplayResult:
    """Trade ``spec`` bar by bar on a fresh simulated account; compare with the backtest."""
    lo, hi = window(params, spec)
    fs = feature_set.load(params.dirs.features)
    stamps = pd.DatetimeIndex(fs.timestamps[lo - 1 : hi + 1], name="ts")
    db, journal = params.dirs.broker / REPLAY_DB, params.dirs.broker / REPLAY_JOURNAL
    for file in (db, journal):
        for stale in (file, file.with_name(file.name + "-wal"), file.with_name(file.name + "-shm")):
            stale.unlink(missing_ok=True)
    keys = local_keys(params)
    equity = []
    champion = Policy(params, pinned=True)
    meta = champion.current()[1].unwrap_python_model().meta
    env, bars = meta.env, [bar_key(ts, meta.freq) for ts in stamps[[1, -1]].to_numpy()]
    name = f"replay {bars[0]}..{bars[1]}"
    with local_broker(params, ledger=db, clock="simulated", day=stamps[0].tz_localize("UTC").to_pydatetime(),
                      initial_cash=env.initial_cash,  # the account the champion was trained for
                      cost_pct=env.cost_pct) as url, mlflow_run(params, name, url), requests.Session() as clock:
        client = trading_client(keys, url)
        clock.trust_env = False  # the broker this replay started, on 127.0.0.1: no proxy to look up
        metrics = BatchedMetrics()
        loop = TradingLoop(params, client, Journal.of(client, journal), metrics, enforce_risk=False)
        loop.policy = champion
        equity.append(float(client.get_account().equity))
        flagged: list[dict[str, object]] = []
        for t in range(lo - 1, hi):
            cycle = loop.cycle(t, after_submit=lambda: advance(url, keys, "open", clock))
            flagged += [{"bar": cycle.bar, **entry} for entry in cycle.flagged]
            advance(url, keys, "close", clock)
            equity.append(float(client.get_account().equity))
            if (t - lo + 2) % 50 == 0:
                log.info("replay: %d of %d bars, equity %.2f", t - lo + 2, hi - lo + 1, equity[-1])
        metrics.flush()
        result = _compare(params, stamps, bars, np.array(equity), flagged)
        _log_to_mlflow(result)
    return result


def _compare(params: Params, stamps: pd.DatetimeIndex, bars: list[str], paper: np.ndarray,
             flagged: list[dict[str, object]]) -> ReplayResult:
    """The paper curve beside the backtest's (when it covers the same bars), and what the live
    checks would have blocked; ``bars``: the first and last traded."""
    curve = pd.DataFrame({"paper": paper}, index=stamps)
    backtest_file = params.dirs.backtest / CURVE_FILE
    difference = None
    if backtest_file.exists():
        backtest = pd.read_csv(backtest_file, index_col=0, parse_dates=True)["agent"]
        if len(backtest) == len(curve) and (pd.DatetimeIndex(backtest.index) == curve.index).all():
            curve["backtest"] = backtest.to_numpy()
            difference = float(np.abs(curve["paper"] - curve["backtest"]).max())
    with atomic_dir(params.dirs.broker / "replay") as staging:
        curve.to_csv(staging / REPLAY_CURVE)
        pd.DataFrame(flagged, columns=list(FLAGGED_COLUMNS)).to_csv(staging / REPLAY_FLAGGED, index=False)
        _plot(curve, staging / REPLAY_PLOT, difference)
        (staging / "replay.json").write_text(json.dumps({"start": bars[0], "end": bars[1],
                                                          "max_difference": difference}))
    folder = params.dirs.broker / "replay"
    orders = sum("client_order_id" in entry for entry in flagged)
    return ReplayResult(bars[0], bars[1], len(stamps) - 1, float(paper[-1]), difference, orders,
                        len(flagged) - orders, folder / REPLAY_PLOT, folder / REPLAY_CURVE, folder / REPLAY_FLAGGED)


def _plot(curve: pd.DataFrame, path: Path, difference: float | None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True, height_ratios=(3, 1))
    if "backtest" in curve:
        top.plot(curve.index, curve["backtest"], color="tab:gray", linewidth=3, label="backtest (env)")
    top.plot(curve.index, curve["paper"], color="tab:blue", linewidth=1, label="paper account (broker)")
    top.set_ylabel("equity")
    top.set_title("Replay on the paper broker" + ("" if difference is None else
                                                   f": largest difference {difference:.2e}"))
    top.legend(loc="upper left")
    top.grid(alpha=0.3)
    if "backtest" in curve:
        bottom.plot(curve.index, curve["paper"] - curve["backtest"], color="tab:red")
    bottom.set_ylabel("paper − backtest")
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _log_to_mlflow(result: ReplayResult) -> None:
    import mlflow

    mlflow.log_metrics({"replay_final_equity": result.final_equity, "replay_bars": result.bars,
                        "replay_risk_flagged": result.flagged, "replay_risk_halts": result.halts,
                        **({"replay_max_difference": result.max_difference} if result.max_difference is not None
                           else {})})
    mlflow.log_artifact(str(result.plot), artifact_path="replay")
    mlflow.log_artifact(str(result.curve), artifact_path="replay")
    mlflow.log_artifact(str(result.risk), artifact_path="replay")


def verdict(result: ReplayResult) -> str:
    """One line on parity with the backtest, and on the risk checks the replay only shadowed."""
    if result.max_difference is None:
        parity = "no backtest of this window to compare with (run `podracer backtest`; --replay test)"
    elif result.equal_to_the_cent:
        parity = f"equal to the backtest to the cent (largest difference {result.max_difference:.1e})"
    else:
        parity = f"DIFFERS from the backtest by up to {result.max_difference:,.2f}"
    shadowed = []
    if result.flagged:
        shadowed.append(f"blocked {result.flagged} order(s)")
    if result.halts:
        shadowed.append(f"halted on {result.halts} bar(s)")
    return parity + (f"; the live risk checks would have {' and '.join(shadowed)} (each with its reason: "
                     f"{result.risk})" if shadowed else "")
