"""Where the learner's edge is lost: ablations on the development seeds (docs/results.md, where the edge was lost).

Each arm is ``params.yaml`` with a few overrides (:data:`ARMS`). For every arm and market seed
the evolution trains as the pipeline's does, and its champion (the best validation snapshot)
is scored on the training, validation and test windows, each **less buy-and-hold's Sharpe on
the same window**, so the gap between in sample and out of sample shows arm by arm. The
``vanilla`` arm is one agent trained for the shipped run's env steps (its policy at the end).

Beside the arms, per seed, what needs no RL, traded through the agents' own action (weights
every 5 bars, tilt 1, 1% band; ``benchmarks/archive/ceiling.py``): the ``ewm_40``, ``sr_40``
(that trend over its volatility) and ``ewm_20`` rankings, the one of them best on validation
(what choosing a start on validation is worth), their blends (what averaging members started at
each would be worth), the least-squares scorer fitted on the training window to the agents' own
(normalised) inputs (a perfect optimiser of a linear scorer in sample), and the filter that knows
the generator (``--rules``: these alone, no training).

**Selection**, from the shipped arm's run: the registered policy (the final population's best,
``evolution.select``), the best validation snapshot of all generations (the paper's evaluator),
the best of the final population, its mean allocation, the final agent with the best *training*
Sharpe, and the final agent best on *test* (a bound no selection rule reaches, set against the
vanilla agent); with the run's number of evaluations, the lead the best of them would have by
luck alone (SR₀) and the registered policy's deflated Sharpe ratio (Bailey & López de Prado
2014; ``trainers/common/metrics.py``). The report is :mod:`benchmarks.evidence.ablations_report`.

``--market minute`` runs the arms on params.minute.yaml's market and learner instead (its shipped
arm is that file; the filter, which knows a daily generator, is not a reference there).

Development seeds only; the designs chosen here run once on fresh seeds in
``benchmarks.evidence.results``.

    .venv/bin/python -m benchmarks.evidence.ablations --seeds 100-109 --jobs 2 --json docs/results/dev/ablations.json
    .venv/bin/python -m benchmarks.evidence.ablations --rules --json docs/results/dev/ablations-rules.json
    .venv/bin/python -m benchmarks.evidence.ablations --report docs/results/dev/ablations.json --plot ablations.png
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.common import Market, build_market, seeds_of
from benchmarks.evidence.augment import augmented, more_history

SNAPSHOT = "evolution.select=snapshot"
"""The selection of the learner before this study: the best validation snapshot of all generations."""
BEFORE = ["features.normalise=per_stock", "env.reward=value", "ppo.average=0", SNAPSHOT]
"""The learner as it stood before this study (docs/results-archive.md), against today's params.yaml."""


@dataclass(frozen=True)
class Arm:
    overrides: list[str]
    what: str
    reference: str = "shipped"
    """The arm its test edge is paired with: the shipped learner, or for the arms that change one
    thing of the learner selecting its best snapshot, that learner."""


AVERAGED = "+ averaged policy"
FINAL = "selection: the final population's best"
"""The shipped learner's registered policy since ``evolution.select: final`` (a row of the shipped arm's run)."""
DAILY = "the daily learner"
"""params.yaml's learner as an arm: what it is worth on another market kind (``--market minute``)."""
ARMS: dict[str, Arm] = {
    "before": Arm(BEFORE, "the learner before this study: per-stock normalisation, absolute credit, the last "
                          "iterate, the best snapshot"),
    "+ pooled normalisation": Arm(["env.reward=value", "ppo.average=0", SNAPSHOT], "one train mean and sd per feature"),
    "+ market-relative credit": Arm(["ppo.average=0", SNAPSHOT], "each stock credited over the equal-weight market"),
    AVERAGED: Arm([SNAPSHOT], "the policy is the average of the weights (ppo.average)"),
    "shipped": Arm([], "+ the final population's best (evolution.select): params.yaml"),
    "no averaging": Arm(["ppo.average=0"], "the shipped learner with the last iterate as its policy"),
    "joint credit": Arm(["ppo.credit=joint", SNAPSHOT], "one GAE advantage for the whole action", AVERAGED),
    "noise x e": Arm(["ppo.init_log_std=-1.5", SNAPSHOT], "exploration noise e^-1.5 (shipped e^-2.5)", AVERAGED),
    "noise / e": Arm(["ppo.init_log_std=-3.5", SNAPSHOT], "exploration noise e^-3.5", AVERAGED),
    "scorer 4": Arm(["ppo.net_dims=[4]", "evolution.search_space.net_width=[2,6]", SNAPSHOT], "a 4-unit scorer",
                    AVERAGED),
    "scorer 16": Arm(["ppo.net_dims=[16]", "evolution.search_space.net_width=[8,24]", SNAPSHOT], "a 16-unit scorer",
                     AVERAGED),
    "last 3 years": Arm(["features.train_start=2019-01-01", SNAPSHOT], "train on 2019-2021 only (half the history)",
                        AVERAGED),
    "average 32": Arm(["ppo.average=32", SNAPSHOT], "a shorter average: about 32 iterations", AVERAGED),
    "16 generations": Arm(["evolution.generations=16", SNAPSHOT], "half the shipped generations", AVERAGED),
    "augmented: 4 bootstraps": Arm([SNAPSHOT], "4 more training histories, block-resampled from the training "
                                               "window's returns", AVERAGED),
    "4 more histories": Arm([SNAPSHOT], "4 more training histories drawn from the embedded market's generator (a "
                                        "diagnostic: no real market offers them)", AVERAGED),
    "ewm_40 only": Arm(["features.indicators=[ewm_40_xs]"], "the rule's input alone: can PPO reach the rule?"),
    "trend over volatility": Arm(["features.indicators=[ewm_20_xs,sr_40_xs,vol_20]"],
                                 "ewm_40_xs replaced by sr_40_xs, the same trend over its 40-bar volatility", FINAL),
    "started at the sr_40 rule": Arm(["features.indicators=[sr_40_xs,ewm_20_xs,vol_20]", "ppo.start_ranked_by=0"],
                                     "sr_40_xs in place of ewm_40_xs, each scorer started as the ranking by it",
                                     FINAL),
    "anchor 10": Arm(["ppo.anchor=10"], "each scorer pulled towards its start, the sr_40 rule, at every Adam step "
                                      "(ppo.anchor: 10, a memory of about 200 steps)", "started at the sr_40 rule"),
    "anchor 2": Arm(["ppo.anchor=2"], "the same pull, 5 times weaker (a memory of about 1,000 steps)",
                    "started at the sr_40 rule"),
    "no volatility": Arm(["features.indicators=[ewm_20_xs,ewm_40_xs]"], "the two trends without vol_20"),
    "ranked scores": Arm(["env.tilt=1.0"], "the env trades tanh(z) of the action's cross-sectional z-score: the "
                                           "agent learns the ranking, the rule's mapping sets the concentration"),
    "scorer 4, final": Arm(["ppo.net_dims=[4]", "evolution.search_space.net_width=[2,6]"],
                           "a 4-unit scorer, the shipped selection"),
    "epochs 4": Arm(["ppo.repeat_times=4", "evolution.search_space.repeat_times=[2,8]"],
                    "half the passes over each rollout (the GPU's update at half the cost)"),
    "epochs 2": Arm(["ppo.repeat_times=2", "evolution.search_space.repeat_times=[1,4]"],
                    "a quarter of the passes, the same learning rate"),
    "epochs 1": Arm(["ppo.repeat_times=1", "evolution.search_space.repeat_times=[1,2]"],
                    "one pass over each rollout: half of 2 passes' update"),
    "epochs 2, lr x2": Arm(["ppo.repeat_times=2", "evolution.search_space.repeat_times=[1,4]", f"ppo.lr={2**-10}",
                            f"evolution.search_space.lr=[{2**-15},{2**-9}]"],
                           "a quarter of the passes at twice the learning rate"),
    "epochs 2, whole rollout, lr x4": Arm(["ppo.repeat_times=2", "evolution.search_space.repeat_times=[1,4]",
                                           "ppo.batch_size=8192", f"ppo.lr={2**-9}",
                                           f"evolution.search_space.lr=[{2**-14},{2**-8}]"],
                                          "2 Adam steps a rollout, each over all of it, at 4 times the learning "
                                          "rate: fewer passes over larger batches, as a GPU wants them"),
    "band 5%": Arm(["env.rebalance_band=0.05"], "a 5% no-trade band: an order under 5% of the account is not sent"),
    "every 30 bars": Arm(["env.decide_every=30"], "a decision every 30th bar: 13 a session, not 78"),
    DAILY: Arm(["features.indicators=[sr_40_xs,ewm_20_xs,vol_20]", "ppo.start_ranked_by=0", "ppo.anchor=10"],
               "params.yaml's learner: sr_40_xs first, each scorer started as its ranking and anchored to it "
               "(on params.yaml's market, the shipped arm itself; for --market minute)"),
}
REFERENCE = "shipped"
LADDER = ("before", "+ pooled normalisation", "+ market-relative credit", AVERAGED, "shipped")
WINDOWS = ("train", "val", "test")
MORE = {"augmented: 4 bootstraps": ("bootstrap", 4), "4 more histories": ("generator", 4)}
"""The arms that train on more history than the market's own (:mod:`benchmarks.evidence.augment`)."""


def edges(m: Market, policy: Any) -> dict[str, float]:
    """``policy``'s Sharpe less buy-and-hold's on each window."""
    from trainers.common.evaluate import buy_and_hold
    from trainers.common.metrics import performance

    out = {}
    for name, window in zip(WINDOWS, (m.train, m.val, m.test)):
        hold = performance(buy_and_hold(m.data, m.params.env, window), m.per_year)["sharpe"]
        out[name] = m.metrics(policy, window)["sharpe"] - hold
    return out


def held(m: Market, scores: torch.Tensor) -> dict[str, float]:
    """A ranking traded through the agents' weights action (:func:`benchmarks.rules.held_ranking`),
    less buy-and-hold."""
    from benchmarks.rules import held_ranking
    from trainers.common.evaluate import buy_and_hold
    from trainers.common.metrics import performance

    out = {}
    for name, window in zip(WINDOWS, (m.train, m.val, m.test)):
        hold = performance(buy_and_hold(m.data, m.params.env, window), m.per_year)["sharpe"]
        out[name] = performance(held_ranking(m.data, m.params.env, window, scores), m.per_year)["sharpe"] - hold
    return out


PRIORS = ("ewm_40 rule", "sr_40 rule", "ewm_20 rule")
"""The rankings that need no fitting: starts a population's members could each be given."""
PICKED = "the rule best on validation"
START = "sr_40 rule"
"""The rule the shipped learner starts at (``ppo.start_ranked_by``): what :data:`PICKED` is paired with."""


def picked(rules: list[dict[str, Any]]) -> dict[str, Any]:
    """Of :data:`PRIORS`' rows, the one with the best validation edge, renamed :data:`PICKED`:
    what selection on validation gains over one fixed start, were each member of a population
    started at a different rule. A non-finite validation edge is never picked; with none finite,
    nothing is (``picked`` None, every edge NaN)."""
    best = max((r for r in rules if r["arm"] in PRIORS),
               key=lambda r: r["val"] if math.isfinite(r["val"]) else -math.inf)
    if not math.isfinite(best["val"]):
        return {"arm": PICKED, "picked": None, **dict.fromkeys(WINDOWS, math.nan)}
    return {**best, "arm": PICKED, "picked": best["arm"]}


def blended(scores: list[np.ndarray]) -> np.ndarray:
    """``[T, n]`` mean of ``scores``' cross-sectional z-scores, bar by bar
    (:func:`tasks.data.momentum.cross_sectional_z`, the ``_xs`` features' own; a ranking with no
    value yet at a bar is neutral there): the ranking a population of members, each started at
    one of the rankings, would trade were their allocations averaged rather than one chosen on
    validation. A screen: the ensemble (:class:`trainers.population.ensemble.Ensemble`) averages
    allocations, not z-scores."""
    from tasks.data.momentum import cross_sectional_z

    return np.mean([cross_sectional_z(s) for s in scores], axis=0)


BLENDS = {"blend: the three rules": PRIORS, "blend: sr_20, sr_40, sr_60": ("sr_20", START, "sr_60")}
"""The averaged populations :func:`blended` screens: members started at the three rules, or at the
trend over its volatility at three horizons. Each is paired with the learner's start."""


def references(m: Market) -> list[dict[str, Any]]:
    """What needs no RL, per window: the rules (:data:`PRIORS`), the one of them best on
    validation, their blends (:data:`BLENDS`), the least-squares scorer, the filter (daily bars
    only: it filters the generator's daily drift)."""
    from benchmarks.archive.ceiling import linear_fit
    from benchmarks.evidence.results import oracle_scores
    from tasks.data.momentum import ewm_return, trend_sharpe
    from tasks.data.synthetic import filtered_drift

    fitted = torch.tensor(m.data.features.double().numpy() @ linear_fit(m.data, m.train, 5))
    close = m.data.close.numpy()
    rankings = dict(zip(PRIORS, (ewm_return(close, 40), trend_sharpe(close, 40), ewm_return(close, 20))))
    rankings |= {"sr_20": trend_sharpe(close, 20), "sr_60": trend_sharpe(close, 60)}
    rules = [{"arm": name, **held(m, torch.tensor(rankings[name]))} for name in PRIORS]
    fits = {name: torch.tensor(blended([rankings[k] for k in parts])) for name, parts in BLENDS.items()}
    fits["least-squares scorer"] = fitted
    if m.params.data.freq == "1d":  # the generator's drift is a daily one: no filter of minute bars
        fits["filter"] = oracle_scores(m.params, m.fs, filtered_drift)
    return [*rules, picked(rules), *({"arm": name, **held(m, scores)} for name, scores in fits.items())]


BOUND = "selection: the final agent best on test (a bound)"
"""What no selection rule can beat: the final agent chosen by its test edge, which only a reader of
the future could do. Its lead over one vanilla agent bounds what choosing among the population
could earn it."""


def bound(scored: list[dict[str, float]]) -> dict[str, Any]:
    """Of the final agents' edges, the one best on test (:data:`BOUND`), with ``spread``: the best
    agent's test edge less the worst's. A non-finite test edge (a diverged agent) is neither; with
    none finite, every edge is NaN."""
    finite = [e for e in scored if math.isfinite(e["test"])]
    if not finite:
        return {"arm": BOUND, **dict.fromkeys(WINDOWS, math.nan), "spread": math.nan}
    tests = [e["test"] for e in finite]
    return {"arm": BOUND, **finite[int(np.argmax(tests))], "spread": max(tests) - min(tests)}


def selection(m: Market, evo: Any, result: Any) -> list[dict[str, Any]]:
    """The shipped run's other ways to choose, each with its edges, and the registered choice's
    luck (SR₀ of the run's evaluations) and the deflated Sharpe of its validation record."""
    from trainers.algorithms import ALGORITHMS
    from trainers.common.evaluate import run_policy
    from trainers.common.metrics import deflated_sharpe
    from trainers.population.ensemble import Ensemble

    pop = evo.state
    finals = [m.actor(ALGORITHMS["ppo"].actor_weights(state), h) for state, h in zip(pop.states, pop.hparams)]
    scored = [edges(m, a) for a in finals]
    best = max(range(len(pop.best)), key=lambda i: pop.best[i][0])
    snapshot = m.actor(pop.best[best][2], evo._hparams_at(pop.best[best][1], best))
    chosen = m.actor(result.best_actor, result.best_hparams)
    values = run_policy(chosen, m.data, m.scales, m.params.env, m.val)
    trials = np.array([r.fitness for r in result.history])
    return [{"arm": "selection: the registered policy", **edges(m, chosen), "trials": len(trials),
             "luck": result.luck, "dsr": deflated_sharpe(np.diff(values) / values[:-1], trials, m.per_year),
             "final": result.best_generation == len({r.generation for r in result.history}) - 1},
            {"arm": "selection: the best validation snapshot", **edges(m, snapshot)},
            {"arm": FINAL, **max(scored, key=lambda e: e["val"])},
            {"arm": "selection: the final population's mean allocation",
             **edges(m, Ensemble(finals, m.params.env.action))},
            {"arm": "selection: the final agent best in sample", **max(scored, key=lambda e: e["train"])},
            bound(scored)]


def run_arm(job: tuple[str | None, int, list[str], bool, str]) -> list[dict[str, Any]]:
    """Train one arm on one seed of a market kind (``learnable``: params.yaml's, or ``minute``); the
    shipped arm adds the vanilla agent, the selection rules and the references unless ``bare``. Arm
    ``None``: the references alone, no training."""
    from trainers.population.config import EvolutionConfig
    from trainers.population.evolution import Evolution
    from trainers.ppo.multiplex import run_multiplexed

    arm, seed, overrides, bare, market = job
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        m = build_market(Path(tmp), market, seed, [*(ARMS[arm].overrides if arm else []), *overrides])
    if arm is None:
        return _printed(references(m), seed)
    own = m
    if arm in MORE:
        m = augmented(m, more_history(m, *MORE[arm], seed))
    started = time.perf_counter()
    evo = Evolution(m.data, m.scales, m.params.env, m.params.ppo, m.params.evolution, m.train, m.val, m.per_year)
    result = evo.run(runner=run_multiplexed)
    rows = [{"arm": arm, **edges(m, m.actor(result.best_actor, result.best_hparams)), "env_steps": result.env_steps,
             "seconds": time.perf_counter() - started, "fitness": result.best_fitness}]
    if m is not own:  # the train edge on the market's own training window, as every other arm's
        rows[0]["train"] = edges(own, own.actor(result.best_actor, result.best_hparams))["train"]
    if arm == REFERENCE and not bare:
        ppo = m.params.ppo
        single = EvolutionConfig(population=1, generations=1, iterations_per_generation=max(1, math.ceil(
            result.env_steps / (ppo.num_envs * ppo.horizon))), eval_interval=m.params.evolution.eval_interval,
            quantile=0.0, search_space={}, seed=seed)
        alone = Evolution(m.data, m.scales, m.params.env, ppo, single, m.train, m.val, m.per_year)
        done = alone.run(runner=run_multiplexed)
        from trainers.algorithms import ALGORITHMS

        rows.append({"arm": "vanilla", **edges(m, m.actor(ALGORITHMS["ppo"].actor_weights(alone.state.states[0]),
                                                           ppo.hparams())), "env_steps": done.env_steps})
        rows += selection(m, evo, result) + references(m)
    return _printed(rows, seed)


def _printed(rows: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    for row in rows:
        row["seed"] = seed
        print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=seeds_of, default=seeds_of("100-109"),
                        help="development seeds to choose on; fresh ones only once, to confirm a choice made")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--market", default="learnable", choices=("learnable", "minute"),
                        help="params.yaml's embedded market, or params.minute.yaml's (its learner as shipped)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--set", "-s", dest="overrides", action="append", default=[],
                        help="a params.yaml override for every arm (KEY=VALUE), e.g. -s evolution.generations=2")
    parser.add_argument("--bare", action="store_true",
                        help="the shipped arm's own row only: no vanilla agent, selection rows or references")
    parser.add_argument("--rules", action="store_true",
                        help="the references alone (the rules, the least-squares scorer, the filter): no training")
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--report", type=Path, nargs="+", help="print the report of earlier --json runs")
    parser.add_argument("--plot", type=Path,
                        help="draw the report's plot here (e.g. docs/img/ablations.png); none without it")
    args = parser.parse_args()
    if args.report:
        rows = list({(r["arm"], r["seed"]): r for p in args.report for r in json.loads(p.read_text())["rows"]}.values())
        _reported(rows, args.plot)
        return
    started = time.perf_counter()
    arms: list[str | None] = [None] if args.rules else args.arms
    jobs = [(arm, seed, args.overrides, args.bare, args.market) for arm in arms for seed in args.seeds]
    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
        rows = [r for part in pool.imap(run_arm, jobs) for r in part]
    result = {"command": ".venv/bin/python -m benchmarks.evidence.ablations " + shlex.join(sys.argv[1:]),
              "minutes": (time.perf_counter() - started) / 60, "rows": rows,
              "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1))
    _reported(rows, args.plot)


def _reported(rows: list[dict[str, Any]], figure: Path | None) -> None:
    """Print the report of ``rows``; draw its plot at ``figure`` when one is named."""
    from benchmarks.evidence.ablations_report import plot, report

    print(report(rows))
    if figure is not None:
        plot(rows, figure)


if __name__ == "__main__":
    main()
