"""A tournament of several algorithms (docs/results.md, Several algorithms): PPO, SAC and a
mixed pool at equal env steps, and ensembles of their leaderboards, on the **test** window.

Arms, all trading by the env's rules (next-open fills, 0.2% costs):

* **ppo**, **sac**, **mixed**: a tournament (``evolution.mode: tournament``) with
  ``tournament.algorithms`` ``{ppo: 1}``, ``{sac: 1}`` and ``{ppo: 0.5, sac: 0.5}``, the same
  jobs and the same hard env-step budget (``evolution.budget_env_steps``); each arm's model is
  its best validation snapshot, as the train stage registers;
* **mixed-ensemble**: the mixed leaderboard's top k (``registry.ensemble``, 4 by default) as
  one policy, the mean of their target allocations (:class:`trainers.population.ensemble.Ensemble`);
* **ppo-ensemble**: the PPO leaderboard's top k, to tell the ensemble's effect from the mix's;
* **momentum**, **oracle** (learnable market only) and **buy-and-hold**, as in ``results.py``.

Markets and seeds as in ``results.py``: designs on development seeds, the evidence on seeds
not used before, run once. The report pairs every arm with buy-and-hold and with the PPO
tournament's champion, per seed, and gives the t statistic of the differences.

    .venv/bin/python -m benchmarks.evidence.algorithms --seeds 100-101 \
        --markets learnable -s tournament.jobs=48 -s evolution.budget_env_steps=786432 \
        --json docs/results/dev/algorithms-dev.json
    .venv/bin/python -m benchmarks.evidence.algorithms --seeds 60-63 \
        --markets learnable null arch-demo -s tournament.jobs=48 -s evolution.budget_env_steps=786432 \
        --json docs/results/algorithms.json
    .venv/bin/python -m benchmarks.evidence.algorithms --merge docs/results/algorithms.json \
        --dev docs/results/dev/algorithms-dev.json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

from benchmarks.common import ROOT, Market, blank_actor, build_market, seeds_of
from benchmarks.evidence.algorithms_report import write_section
from benchmarks.evidence.results import MARKETS, Row, oracle_scores, run_all
from benchmarks.rules import momentum_scores, ranked_portfolio
from trainers.algorithms import config_of
from trainers.common.evaluate import buy_and_hold
from trainers.common.metrics import performance
from trainers.common.nets import Actor
from trainers.population.ensemble import Ensemble
from trainers.population.evolution import EvolutionResult, Leader
from trainers.population.tournament import Tournament

POOLS = {"ppo": {"ppo": 1.0}, "sac": {"sac": 1.0}, "mixed": {"ppo": 0.5, "sac": 0.5}}
ENSEMBLED = ("ppo", "mixed")
"""The pools whose top k also serve as an ensemble arm."""


def actor_of(m: Market, algorithm: str, hparams: dict[str, float], weights: dict[str, torch.Tensor]) -> Actor:
    """The deterministic actor an ``algorithm`` agent with ``hparams`` trained, with ``weights``."""
    actor = blank_actor(m.data, m.scales, config_of(m.params, algorithm).with_hparams(hparams))
    actor.load_state_dict(weights)
    return actor.eval()


def ensemble_of(m: Market, leaders: list[Leader]) -> Ensemble:
    return Ensemble([actor_of(m, e.algorithm, e.hparams, e.actor) for e in leaders], m.params.env.action)


def tournament(m: Market, algorithms: dict[str, float], label: str) -> tuple[EvolutionResult, float]:
    """One tournament arm on ``m``'s train window, selecting on validation; its wall seconds."""
    p = m.params
    tcfg = replace(p.tournament, algorithms=algorithms)
    started = time.perf_counter()
    run = Tournament(m.data, m.scales, p.env, p.ppo, p.evolution, tcfg, m.train, m.val, m.per_year, p.nitro, p.sac)
    done = [0]

    def progress(depth: int, job: int, fitness: float) -> None:
        done[0] += 1
        if done[0] % 16 == 0:
            print(f"  {label}: {done[0]} evaluations, {time.perf_counter() - started:.0f}s", flush=True)

    result = run.run(on_evaluated=progress)
    return result, time.perf_counter() - started


def run_seed(job: tuple[str, int, list[str], int]) -> list[Row]:
    """Build one market, train the three pools, score every arm on test (and on train)."""
    market, seed, overrides, k = job
    torch.set_num_threads(1)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        m = build_market(Path(tmp), market, seed, [*overrides, "evolution.mode=tournament"])

        def row(arm: str, policy: torch.nn.Module, fitness: float, steps: int, seconds: float) -> Row:
            test, train = m.metrics(policy, m.test), m.metrics(policy, m.train)
            return Row(market, seed, arm, test["sharpe"], test["cumulative_return"], fitness, steps, seconds,
                       train["sharpe"])

        for name, algorithms in POOLS.items():
            result, seconds = tournament(m, algorithms, f"{market} {seed} {name}")
            best = actor_of(m, result.best_algorithm, result.best_hparams, result.best_actor)
            rows.append(row(name, best, result.best_fitness, result.env_steps, seconds))
            if name in ENSEMBLED:
                leaders = result.leaders[:k]
                rows.append(row(f"{name}-ensemble", ensemble_of(m, leaders), float("nan"), result.env_steps, seconds))
                print(f"{market} {seed} {name}-ensemble members: "
                      + ", ".join(f"{e.algorithm} {e.fitness:.2f}" for e in leaders), flush=True)
        env, data, per_year = m.params.env, m.data, m.per_year
        rules = {"momentum": momentum_scores(data)}
        if market == "learnable":
            rules["oracle"] = oracle_scores(m.params, m.fs)
        for arm, scores in rules.items():
            test = performance(ranked_portfolio(data, env, m.test, scores), per_year)
            train = performance(ranked_portfolio(data, env, m.train, scores), per_year)
            rows.append(Row(market, seed, arm, test["sharpe"], test["cumulative_return"], float("nan"), 0, 0.0,
                            train["sharpe"]))
        test = performance(buy_and_hold(data, env, m.test), per_year)
        train = performance(buy_and_hold(data, env, m.train), per_year)
        rows.append(Row(market, seed, "buy-and-hold", test["sharpe"], test["cumulative_return"], float("nan"), 0, 0.0,
                        train["sharpe"]))
    for r in rows:
        print(json.dumps({k: v for k, v in asdict(r).items() if k != "curve"}), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=seeds_of, default=seeds_of("100-101"),
                        help="market seeds: 100-109 to develop; fresh ones for the evidence")
    parser.add_argument("--markets", nargs="+", default=["learnable"], choices=MARKETS)
    parser.add_argument("--set", "-s", dest="overrides", action="append", default=[],
                        help="override a params.yaml key for every arm, e.g. -s tournament.jobs=32")
    parser.add_argument("--ensemble", type=int, default=4, help="k: the ensembles' members")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="(market, seed) pairs run side by side")
    parser.add_argument("--json", type=Path, help="write every row here")
    parser.add_argument("--merge", type=Path, nargs="+", help="report the rows of earlier --json runs")
    parser.add_argument("--dev", type=Path, nargs="+", help="with --merge: the development runs, reported apart")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "results-tables.md")
    args = parser.parse_args()
    if args.merge:
        write_section([json.loads(p.read_text()) for p in args.merge],
                      [json.loads(p.read_text()) for p in args.dev or []], args.out)
        return
    jobs = [(m, s, args.overrides, args.ensemble) for m in args.markets for s in args.seeds]
    write_section([run_all(run_seed, jobs, args.jobs, "-m benchmarks.evidence.algorithms", args.json)], [], None)


if __name__ == "__main__":
    main()
