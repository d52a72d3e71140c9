"""The headline's rule-based baseline on the test year (benchmarks/perf/gpu_train.py): the momentum
rule of benchmarks/rules.py (the top third by 20-bar return, rebalanced every decision) under
the env's fill rule. It runs on the CPU beside the training, in a process of its own, on the
same market rebuilt from its seed; it writes ``OUT/baselines.json``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.perf.gpu_common import paper_env
from benchmarks.perf.gpu_market import minute_market
from benchmarks.rules import momentum_scores, ranked_portfolio
from trainers.common.metrics import performance


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args()
    market = minute_market(8, 12) if args.tiny else minute_market(100, 2520)
    env = paper_env()
    values = ranked_portfolio(market.data, env, market.windows["test"], momentum_scores(market.data, 20),
                              env.decide_every)
    (args.out / "baselines.json").write_text(json.dumps({"momentum": performance(values, market.per_year)}))


if __name__ == "__main__":
    main()
