"""Evidence that the agents learn (docs/results.md): the champion against a vanilla agent, a
momentum rule, an oracle and buy-and-hold, on the **test** window, over market seeds.

Markets: ``learnable`` (the embedded market as in params.yaml, ``data.seed`` = the seed),
``null`` (the same with ``data.signal: 0``: nothing to learn; the leakage check),
``martingale`` (the true null: every strategy's true Sharpe is buy-and-hold's before costs)
and ``arch-demo`` (2 real indices, 1999–2018; test 2016–2018; the seed varies the training
only). Arms, all with the same next-open fills and 0.2% costs:

* **champion**: params.yaml's evolution (``evolution.seed`` = the seed); the model the
  pipeline would register (``evolution.select``: the final population's best). With
  ``--compute K`` the run has K times the generations, and its row is ``champion Kx`` (the
  compute curve);
* **vanilla**: one agent with the PPO defaults for as many env steps, its policy at the end;
* **momentum**: the top third by trailing 20-bar return, equal weight, rebalanced weekly;
* **ewm_40 rule**: the ranking by ``ewm_40``, the trend the agents' inputs are built on, with no
  fitting, traded through the agents' own action (:func:`benchmarks.rules.held_ranking`);
* **sr_40 rule**: the same, ranked by ``sr_40`` (that trend over its volatility), one of the
  agents' own inputs as it is: what the learner must at least earn;
* **filter** (learnable market only): the same, ranked by the generator-aware Kalman filter's
  drift estimate: the best any ranking of past prices can do linearly;
* **oracle** (learnable market only): the momentum rule ranked by the generator's true
  latent drift at t, which nothing else ever sees; the ceiling of what the signal allows;
* **buy-and-hold**: equal weight.

Each row also has the arm's Sharpe on the training window, to tell an agent that did not
find the signal in sample from one that found it and did not generalise. Also a learning
curve: the champion's test Sharpe after each generation against env steps and wall time.
Development uses seeds 100–109 (``benchmarks.evidence.ablations``); the evidence for today's
learner is seeds 30–39, run once (docs/results.md):

    .venv/bin/python -m benchmarks.evidence.results --seeds 30-39 --markets learnable --jobs 2 \
        --json docs/results/fresh-learnable.json
    .venv/bin/python -m benchmarks.evidence.results --seeds 30-39 --markets learnable --compute 4 --jobs 2 \
        --json docs/results/fresh-compute4.json
    .venv/bin/python -m benchmarks.evidence.results --merge docs/results/fresh-*.json
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.common import ROOT, build_market, seeds_of
from benchmarks.evidence.results_report import OverlapError, write_report
from benchmarks.rules import held_ranking, momentum_scores, ranked_portfolio
from tasks.config import Params
from tasks.data import feature_set
from tasks.data.momentum import ewm_return, trend_sharpe
from tasks.data.synthetic import filtered_drift, latent_drift
from trainers.algorithms import ALGORITHMS, DEFAULT_LEARNER
from trainers.common.evaluate import buy_and_hold
from trainers.common.metrics import performance
from trainers.population.config import EvolutionConfig
from trainers.population.evolution import Evolution, EvolutionResult
from trainers.ppo.multiplex import run_multiplexed

MARKETS = ("learnable", "null", "martingale", "arch-demo")
"""The market kinds (benchmarks/common.py, KINDS) this file's arms and report are for."""


@dataclass
class Row:
    market: str
    seed: int
    arm: str
    sharpe: float
    cumulative_return: float
    validation: float
    """Validation fitness of the chosen weights (NaN where there is none)."""
    env_steps: int
    seconds: float
    train_sharpe: float = math.nan
    """Sharpe on the training window itself: an arm that loses there did not fit its own data."""
    curve: list[list[float]] = field(default_factory=list)
    """champion only: [generation, env steps, seconds, test Sharpe] after each generation."""


def oracle_scores(params: Params, fs: feature_set.FeatureSet,
                  source: Callable[..., Any] = latent_drift) -> torch.Tensor:
    """``[T, n]`` the synthetic generator's expected drift at each bar of the feature set
    (``source=filtered_drift``: the best estimate of it from past returns)."""
    d = params.data
    drift = source(d.symbols, d.start, d.end, d.signal, d.seed)
    drift.index = drift.index.tz_localize(None)
    aligned = drift.reindex(fs.timestamps)[fs.symbols].to_numpy()
    if not np.isfinite(aligned).all():
        raise RuntimeError("oracle: the generator's sessions do not cover the feature set")
    return torch.tensor(aligned)


def run_seed(job: tuple[str, int, list[str], int]) -> list[Row]:
    """Build one market, train the champion and the vanilla agent, score every arm on test
    (with ``compute`` K > 1, the champion alone, trained for K times the generations)."""
    market, seed, overrides, compute = job
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        m = build_market(Path(tmp), market, seed, overrides)
        if compute > 1:
            m = replace(m, params=m.params.model_copy(update={"evolution": replace(
                m.params.evolution, generations=m.params.evolution.generations * compute)}))
        params, fs, data, scales, env = m.params, m.fs, m.data, m.scales, m.params.env
        train, val, test, per_year = m.train, m.val, m.test, m.per_year

        def agent_metrics(weights: dict, hparams: dict[str, float], window: tuple[int, int] = test) -> dict[str, float]:
            return m.metrics(m.actor(weights, hparams), window)

        def row(arm: str, metrics: dict[str, float], on_train: dict[str, float], fitness: float = math.nan,
                steps: int = 0, seconds: float = 0.0) -> Row:
            return Row(market, seed, arm, metrics["sharpe"], metrics["cumulative_return"], fitness, steps, seconds,
                       on_train["sharpe"])

        def rule(portfolio: Callable[[tuple[int, int]], np.ndarray], arm: str) -> Row:
            return row(arm, performance(portfolio(test), per_year), performance(portfolio(train), per_year))

        started, curve = time.perf_counter(), []

        def on_generation(best: EvolutionResult) -> None:
            sharpe = agent_metrics(best.best_actor, best.best_hparams)["sharpe"]
            curve.append([len(curve) + 1, best.env_steps, time.perf_counter() - started, sharpe])
            print(f"{market} {seed}: generation {len(curve)}, {best.env_steps:,} env steps, test Sharpe {sharpe:.2f}",
                  flush=True)

        evo = Evolution(data, scales, env, params.ppo, params.evolution, train, val, per_year).run(
            runner=run_multiplexed, on_generation=on_generation)
        name = "champion" if compute == 1 else f"champion {compute}x"
        rows = [row(name, agent_metrics(evo.best_actor, evo.best_hparams),
                    agent_metrics(evo.best_actor, evo.best_hparams, train), evo.best_fitness, evo.env_steps,
                    time.perf_counter() - started)]
        rows[0].curve = curve
        if compute > 1:
            return _printed(rows)

        samples = params.ppo.num_envs * params.ppo.horizon
        single = EvolutionConfig(population=1, generations=1, iterations_per_generation=max(1, math.ceil(
            evo.env_steps / samples)), quantile=0.0, eval_interval=params.evolution.eval_interval,
            fitness=params.evolution.fitness, search_space={}, seed=seed)
        started = time.perf_counter()
        run = Evolution(data, scales, env, params.ppo, single, train, val, per_year)
        vanilla = run.run()
        weights, seconds = ALGORITHMS[DEFAULT_LEARNER].actor_weights(run.state.states[0]), time.perf_counter() - started
        rows.append(row("vanilla", agent_metrics(weights, params.ppo.hparams()),
                        agent_metrics(weights, params.ppo.hparams(), train), steps=vanilla.env_steps, seconds=seconds))

        momentum = momentum_scores(data)
        rows.append(rule(lambda window: ranked_portfolio(data, env, window, momentum), "momentum"))
        for arm, scores in (("ewm_40 rule", ewm_return), ("sr_40 rule", trend_sharpe)):
            ranking = torch.tensor(scores(data.close.numpy(), 40))
            rows.append(rule(lambda window, ranking=ranking: held_ranking(data, env, window, ranking), arm))
        if market == "learnable":
            estimate = oracle_scores(params, fs, filtered_drift)
            rows.append(rule(lambda window: held_ranking(data, env, window, estimate), "filter"))
            oracle = oracle_scores(params, fs)
            rows.append(rule(lambda window: ranked_portfolio(data, env, window, oracle), "oracle"))
        rows.append(rule(lambda window: buy_and_hold(data, env, window), "buy-and-hold"))
    return _printed(rows)


def _printed(rows: list[Row]) -> list[Row]:
    for r in rows:
        print(json.dumps({k: v for k, v in asdict(r).items() if k != "curve"}), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=seeds_of, default=seeds_of("100-109"),
                        help="market seeds: 100-109 to develop, 7-16 for the evidence")
    parser.add_argument("--markets", nargs="+", default=["learnable", "null"], choices=MARKETS)
    parser.add_argument("--set", "-s", dest="overrides", action="append", default=[],
                        help="override a params.yaml key for every run, e.g. -s evolution.generations=2")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="seeds trained side by side")
    parser.add_argument("--compute", type=int, default=1,
                        help="K > 1: the champion alone, with K times params.yaml's generations (the compute curve)")
    parser.add_argument("--json", type=Path, help="write every row here")
    parser.add_argument("--merge", type=Path, nargs="+", help="report the rows of earlier --json runs")
    parser.add_argument("--dev", type=Path, nargs="+",
                        help="with --merge: the development runs, pooled and tabled beside the evidence")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results-tables.md")
    args = parser.parse_args()
    if args.merge:
        try:
            write_report([json.loads(p.read_text()) for p in args.merge],
                         [json.loads(p.read_text()) for p in args.dev] if args.dev else None, args.out)
        except OverlapError as err:  # a bad file or a bug keeps its traceback
            sys.exit(f"results.py --merge: {err}")
        return
    jobs = [(m, s, args.overrides, args.compute) for m in args.markets for s in args.seeds]
    result = run_all(run_seed, jobs, args.jobs, "-m benchmarks.evidence.results", args.json)
    write_report([result], None, None)


def run_all(run: Callable[[Any], list[Row]], jobs: list[Any], processes: int, script: str,
            out: Path | None) -> dict[str, Any]:
    """``run`` on every (market, seed) job in ``processes`` spawned processes: the rows, with
    the command that made them, its minutes and when it finished (written to ``out`` as JSON)."""
    started = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(processes) as pool:
        rows = [r for part in pool.imap(run, jobs) for r in part]
    result = {"command": " ".join([f".venv/bin/python {script}", *sys.argv[1:]]),
              "minutes": (time.perf_counter() - started) / 60, "rows": [asdict(r) for r in rows],
              "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
