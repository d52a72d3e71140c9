"""The headline's rule-based baselines on the test year (benchmarks/perf/gpu_train.py), under the
env's fill rule and costs (benchmarks/rules.py):

* ``momentum``: the top third by 20-bar return, rebalanced at every decision (5 minutes);
* ``session_momentum``: what a trader would run on minute bars: the return over the last 1, 5
  or 20 sessions, traded once a session through the agents' own weights action with its 1%
  no-trade band (:func:`benchmarks.rules.held_ranking`), so it does not pay the costs every
  five minutes. The lookback is the one with the best validation Sharpe, chosen before the
  test year is looked at (``lookback_sessions`` and the validation Sharpes are reported).

They run on the CPU beside the training, in a process of their own, on the same market rebuilt
from its seed; they write ``OUT/baselines.json``."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from benchmarks.perf.gpu_common import paper_env
from benchmarks.perf.gpu_market import SESSION, minute_market
from benchmarks.rules import held_ranking, momentum_scores, ranked_portfolio
from trainers.common.metrics import performance

LOOKBACKS = (1, 5, 20)
"""Sessions of trailing return the session rule may rank by."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args()
    market = minute_market(8, 12) if args.tiny else minute_market(100, 2520)
    env = paper_env()
    test = market.windows["test"]
    fast = ranked_portfolio(market.data, env, test, momentum_scores(market.data, 20), env.decide_every)
    daily = replace(env, decide_every=SESSION)
    validation = {k: performance(held_ranking(market.data, daily, market.windows["validation"],
                                              momentum_scores(market.data, k * SESSION)), market.per_year)["sharpe"]
                  for k in LOOKBACKS}
    chosen = max(LOOKBACKS, key=lambda k: validation[k])
    held = held_ranking(market.data, daily, test, momentum_scores(market.data, chosen * SESSION))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "baselines.json").write_text(json.dumps({
        "momentum": performance(fast, market.per_year),
        "session_momentum": performance(held, market.per_year) | {"lookback_sessions": chosen,
                                                                   "validation_sharpes": validation}}))


if __name__ == "__main__":
    main()
