"""What the state and the weights action allow, with no RL at all (docs/results-archive.md, the ceiling).

A linear scorer is fitted by least squares on the **training** window: each stock's
normalised indicators (the features the shared scorer sees) against its next
``--horizon``-bar open-to-open log return, less the cross-sectional mean. No row whose
target reaches past the training window is used. The fitted scores are then traded on
the training and the test window by the same order and fill rules as the agents:

* through the agents' weights action, every bar or every k bars (the agents'
  ``env.decide_every``): ``a = tanh(tilt · z)`` with ``z`` the
  cross-sectional z-score of the scores (tilt 0 is the neutral agent: equal weight with
  ``1/(n+1)`` in cash, rebalanced every bar), with and without a no-trade band
  (``env.rebalance_band``);
* through the momentum rule (top third, equal weight, every 5 bars) instead of momentum.

Beside the fit, four rankings that need no fitting go through the momentum rule and the
held weights action (tilt 1, band 1%, every 5 bars): momentum itself; ``ewm_40``, an
exponentially weighted mean return (``tasks/data/momentum.py``); the **filter**, the
best linear estimate of the drift from each stock's own past returns, knowing every
generator parameter and factor move (``tasks.data.synthetic.filtered_drift``); and the
oracle's true drift. The filter is the ceiling of what prices can tell about the drift;
the oracle, of what the drift is worth.

An agent that optimised perfectly, on these inputs and this action, would land near the
best of these rows in sample; a row that loses to buy-and-hold even in sample says the
action or the costs, not the optimiser, are in the way. Development seeds only.

    .venv/bin/python -m benchmarks.archive.ceiling --seeds 100-109
    .venv/bin/python -m benchmarks.archive.ceiling --seeds 100-109 -s "features.indicators=[ret_5,ewm_40_xs]"
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import ARCHIVE, Reading, build_features, commit, market_params, now, record, seeds_of
from benchmarks.evidence.results import oracle_scores
from benchmarks.rules import momentum_scores, ranked_portfolio, tilted_portfolio
from tasks.data.momentum import ewm_return
from tasks.data.synthetic import filtered_drift
from trainers.common.env import MarketData
from trainers.common.evaluate import buy_and_hold
from trainers.common.metrics import performance, periods_per_year

VARIANTS = [(0.0, 0.0, 1), (0.0, 0.01, 1), (0.1, 0.0, 1), (0.1, 0.01, 1), (0.3, 0.0, 1), (0.3, 0.01, 1),
            (0.3, 0.01, 5), (1.0, 0.0, 5), (1.0, 0.01, 5), (1.0, 0.01, 10), (1.0, 0.01, 20)]
"""(tilt, rebalance_band, bars between decisions) of the weights-action rows; the bars
between decisions are the agents' ``env.decide_every``."""


def linear_fit(data: MarketData, window: tuple[int, int], horizon: int) -> np.ndarray:
    """``[k]`` least-squares weights of the indicators on the forward ``horizon``-bar
    cross-sectional log return, from bars of ``window`` whose target ends inside it."""
    x, o = data.features.double().numpy(), np.log(data.open.numpy())
    lo, hi = window  # bars lo..hi; the target of bar t runs from open t+1 to open t+1+horizon <= hi
    last = hi - horizon
    if last <= lo:
        raise ValueError(f"ceiling: the training window {window} is shorter than the horizon {horizon}")
    y = o[lo + 1 + horizon:last + 1 + horizon] - o[lo + 1:last + 1]
    y = y - y.mean(axis=1, keepdims=True)
    a = x[lo:last].reshape(-1, x.shape[2])
    a = np.c_[a, np.ones(len(a))]
    beta, *_ = np.linalg.lstsq(a, y.reshape(-1), rcond=None)
    return beta[:-1]


def run_seed(job: tuple[int, int, list[str]]) -> list[tuple[str, float, float, float]]:
    """(row, train Sharpe, test Sharpe, train turnover per year) for one market seed."""
    seed, horizon, overrides = job
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        params = market_params(Path(tmp), "learnable", seed, overrides)
        fs = build_features(params)
    data, train, test = fs.market(), fs.window("train"), fs.window("test")
    per_year = periods_per_year(params.data.freq)
    sharpe = lambda values: performance(values, per_year)["sharpe"]  # noqa: E731
    scores = torch.tensor(data.features.double().numpy() @ linear_fit(data, train, horizon))
    momentum = momentum_scores(data)
    rows = [("buy-and-hold", *(sharpe(buy_and_hold(data, params.env, w)) for w in (train, test)), float("nan")),
            ("momentum rule", *(sharpe(ranked_portfolio(data, params.env, w, momentum)) for w in (train, test)),
             float("nan")),
            ("linear fit, momentum rule", *(sharpe(ranked_portfolio(data, params.env, w, scores))
                                            for w in (train, test)), float("nan"))]
    for tilt, band, every in VARIANTS:
        cfg = replace(params.env, action="weights", rebalance_band=band)
        (v_train, turnover), (v_test, _) = (tilted_portfolio(data, cfg, w, scores, tilt, every, per_year)
                                              for w in (train, test))
        when = "every bar" if every == 1 else f"every {every} bars"
        rows.append((f"linear fit, weights action, tilt {tilt}, band {band:.0%}, {when}", sharpe(v_train),
                     sharpe(v_test), turnover))
    held = replace(params.env, action="weights", rebalance_band=0.01)
    rankings = {"momentum": momentum, "ewm_40": torch.tensor(ewm_return(data.close.numpy(), 40)),
                "filter": oracle_scores(params, fs, filtered_drift), "oracle": oracle_scores(params, fs)}
    for name, ranking in rankings.items():
        if name != "momentum":  # the momentum rule's own row is above
            rows.append((f"{name}, momentum rule", *(sharpe(ranked_portfolio(data, params.env, w, ranking))
                                                     for w in (train, test)), float("nan")))
        (v_train, turnover), (v_test, _) = (tilted_portfolio(data, held, w, ranking, 1.0, 5, per_year)
                                              for w in (train, test))
        rows.append((f"{name}, weights action, tilt 1.0, band 1%, every 5 bars", sharpe(v_train), sharpe(v_test),
                     turnover))
    print(f"seed {seed} done", flush=True)
    return rows


def gains(results: list[list[tuple[str, float, float, float]]]) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Each row's name and its per-seed train and test Sharpe less buy-and-hold's (row 0)."""
    base = np.array([[r[0][1], r[0][2]] for r in results])
    return [(name, *(np.array([r[i][j] for r in results]) - base[:, j - 1] for j in (1, 2)))
            for i, (name, *_) in enumerate(results[0])]


def table(results: list[list[tuple[str, float, float, float]]]) -> str:
    """Mean train and test Sharpe of each row, and its mean paired difference from buy-and-hold."""
    lines = ["| row | train Sharpe | test Sharpe | train − B&H | test − B&H | turnover / year (train) |",
             "|---|---|---|---|---|---|"]
    for i, (name, d_tr, d_te) in enumerate(gains(results)):
        tr, te, to = (np.array([r[i][j] for r in results]) for j in (1, 2, 3))
        turnover = "-" if np.isnan(to).all() else f"{to.mean():.1f}"
        lines.append(f"| {name} | {tr.mean():.2f} | {te.mean():.2f} | {d_tr.mean():+.2f} ± {d_tr.std(ddof=1):.2f} | "
                     f"{d_te.mean():+.2f} ± {d_te.std(ddof=1):.2f} | {turnover} |")
    return "\n".join(lines)


HELD = "linear fit, weights action, tilt 1.0, band 1%, every 5 bars"
"""The row tracked in the history: the fit through the agents' shipped action."""


def history_row(results: list[list[tuple[str, float, float, float]]]) -> tuple[str, str]:
    """Test − buy-and-hold of :data:`HELD`, and of the best row but the oracle's."""
    rows = [(name, d_te) for name, _, d_te in gains(results) if not name.startswith("oracle")]

    def shown(d: np.ndarray) -> str:
        return f"{d.mean():+.2f} ± {d.std(ddof=1):.2f}"

    held = next((shown(d) for name, d in rows if name == HELD), "-")
    name, d = max(rows, key=lambda row: row[1].mean())
    return held, f"{name}: {shown(d)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=seeds_of, default=seeds_of("100-109"), help="development market seeds")
    parser.add_argument("--horizon", type=int, default=5, help="bars of forward return the scorer is fitted on")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--set", "-s", dest="overrides", action="append", default=[],
                        help="params.yaml override (KEY=VALUE), e.g. -s features.indicators=[ret_20,ewm_40_xs]")
    parser.add_argument("--out", type=Path, default=ARCHIVE)
    args = parser.parse_args()
    started = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
        results = pool.map(run_seed, [(s, args.horizon, args.overrides) for s in args.seeds])
    text = table(results)
    command = " ".join([".venv/bin/python -m benchmarks.archive.ceiling", *sys.argv[1:]])
    stamp = now()
    print(text)
    record(Reading(
        "ceiling", "Ceiling: a least-squares scorer through the agents' action",
        f"Learnable market, seeds {args.seeds[0]}–{args.seeds[-1]} (n = {len(args.seeds)}), "
        f"horizon {args.horizon} bars, {(time.perf_counter() - started) / 60:.1f} min. Mean ± sd over seeds.\n\n"
        f"    {command}\n\n{text}",
        ("date", "commit", "command", "seeds", f"{HELD}: test − B&H", "best row but the oracle: test − B&H"),
        (stamp, commit(), f"`{command}`", f"{args.seeds[0]}–{args.seeds[-1]}", *history_row(results))), args.out)


if __name__ == "__main__":
    main()
