"""Which snapshot(s) should the pipeline register? A selection study on development seeds.

The evaluator keeps the best validation snapshot of a run (finrl-podracer §4.2): the
maximum of ``population × generations`` noisy Sharpe ratios over one year, a winner's curse
(docs/results.md). This study trains ``params.yaml``'s evolution once per market seed, keeps every
evaluated snapshot, and scores several selection rules on the **test** window, paired by
seed against the current rule (``best``), buy-and-hold and momentum:

* ``best``: the best validation snapshot (the shipped rule);
* ``top-k``: the ensemble (:class:`Ensemble`) of the k best by validation;
* ``agent-bests``: the ensemble of each agent's best snapshot;
* ``last-gen``: the ensemble of the final generation's agents;
* ``all``: the ensemble of every snapshot (a diagnostic, not a rule).

Development seeds only (100–109): the rule chosen here is what the evidence then runs once.
Prints the table and records it in docs/benchmarks-archive.md (the section's latest reading and a
row of its history).

    OMP_NUM_THREADS=1 .venv/bin/python -m benchmarks.archive.selection --seeds 100-109 --jobs 2 \
        --json docs/results/dev/dev-selection.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from benchmarks.common import ARCHIVE, Reading, build_market, commit, now, record, seeds_of
from benchmarks.evidence.results_report import paired
from benchmarks.rules import momentum_scores, ranked_portfolio
from trainers.common.evaluate import buy_and_hold
from trainers.common.jobs import AgentJob
from trainers.common.metrics import performance
from trainers.common.nets import Actor
from trainers.population.dispatch import Setting
from trainers.population.evolution import Evolution
from trainers.ppo.multiplex import run_multiplexed

TOP_K = (2, 4, 8, 16)


class Ensemble(nn.Module):
    """The mean deterministic action of ``members``: with ``env.action: weights`` the mean of
    their scores before the softmax, with ``shares`` the mean order. Of one member: that actor."""

    def __init__(self, members: list[Actor]):
        super().__init__()
        if not members:
            raise ValueError("an ensemble needs at least one actor")
        self.members = nn.ModuleList(members)

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        return torch.stack([member(state) for member in self.members]).mean(dim=0)


@dataclass(frozen=True)
class Snap:
    """One evaluated snapshot: when, whose, its validation fitness, and the actor then."""

    generation: int
    agent: int
    fitness: float
    hparams: dict[str, float]
    weights: dict[str, torch.Tensor]


def rules(snaps: list[Snap]) -> dict[str, list[Snap]]:
    """Every rule's chosen snapshots, from all of a run's evaluated snapshots."""
    ranked = sorted(snaps, key=lambda s: (-s.fitness, s.generation, s.agent))
    last = max(s.generation for s in snaps)
    agents = sorted({s.agent for s in snaps})
    bests = [max((s for s in snaps if s.agent == a), key=lambda s: (s.fitness, -s.generation)) for a in agents]
    return {"best": ranked[:1], **{f"top-{k}": ranked[:k] for k in TOP_K},
            "agent-bests": bests, "last-gen": [s for s in snaps if s.generation == last], "all": snaps}


def run_seed(job: tuple[int, list[str]]) -> list[dict]:
    seed, overrides = job
    torch.set_num_threads(1)
    snaps: list[Snap] = []

    def capturing(jobs: list[AgentJob], setting: Setting) -> list[AgentJob]:
        done = run_multiplexed(jobs, setting)
        for d in done:
            record = d.records[-1]  # the end-of-generation evaluation: the weights the job returns
            snaps.append(Snap(d.generation, d.index, record.fitness, dict(d.hparams),
                              {k: v.clone() for k, v in d.state["learners"][0]["actor"].items()}))
        return done

    with tempfile.TemporaryDirectory() as tmp:
        m = build_market(Path(tmp), "learnable", seed, overrides)
        started = time.perf_counter()
        Evolution(m.data, m.scales, m.params.env, m.params.ppo, m.params.evolution, m.train, m.val,
                  m.per_year).run(runner=capturing)
        seconds = time.perf_counter() - started
        rows = []
        for name, chosen in rules(snaps).items():
            policy = Ensemble([m.actor(s.weights, s.hparams) for s in chosen])
            rows.append({"seed": seed, "rule": name, "members": len(chosen),
                         "validation": m.metrics(policy, m.val)["sharpe"], "test": m.metrics(policy, m.test)["sharpe"],
                         "train": m.metrics(policy, m.train)["sharpe"]})
        momentum = momentum_scores(m.data)
        for name, fn in (("momentum", lambda w: ranked_portfolio(m.data, m.params.env, w, momentum)),
                         ("buy-and-hold", lambda w: buy_and_hold(m.data, m.params.env, w))):
            rows.append({"seed": seed, "rule": name, "members": 0,
                         **{k: performance(fn(w), m.per_year)["sharpe"]
                            for k, w in (("validation", m.val), ("test", m.test), ("train", m.train))}})
    print(f"seed {seed}: {len(snaps)} snapshots, evolution {seconds:.0f} s; "
          + ", ".join(f"{r['rule']} {r['test']:.2f}" for r in rows), flush=True)
    return rows


def table(rows: list[dict]) -> list[str]:
    """Each rule's test Sharpe − buy-and-hold and − ``best``, paired by seed, with t."""
    by = {(r["rule"], r["seed"]): r for r in rows}
    seeds = sorted({r["seed"] for r in rows})
    names = list(dict.fromkeys(r["rule"] for r in rows if r["rule"] != "buy-and-hold"))

    def diff(a: str, b: str, key: str = "test") -> str:
        return paired([by[(a, s)][key] - by[(b, s)][key] for s in seeds])

    out = [f"{len(seeds)} seeds ({seeds[0]}–{seeds[-1]}), test Sharpe, paired by seed", "",
           "| rule | members | validation − B&H | test − B&H | test − best | train − B&H |",
           "|---|---|---|---|---|---|"]
    for n in names:
        members = statistics.fmean(by[(n, s)]["members"] for s in seeds)
        out.append(f"| {n} | {members:.0f} | {diff(n, 'buy-and-hold', 'validation')} | {diff(n, 'buy-and-hold')} "
                   f"| {diff(n, 'best') if n != 'best' else '-'} | {diff(n, 'buy-and-hold', 'train')} |")
    return out


def history_row(rows: list[dict]) -> tuple[str, str]:
    """``best``'s test − buy-and-hold, and the range of the ensembles' test − ``best`` (``all``,
    a diagnostic, left out)."""
    by = {(r["rule"], r["seed"]): r["test"] for r in rows}
    seeds = sorted({r["seed"] for r in rows})

    def gap(a: str, b: str) -> list[float]:
        return [by[(a, s)] - by[(b, s)] for s in seeds]

    means = [statistics.fmean(gap(n, "best")) for n in dict.fromkeys(r["rule"] for r in rows)
             if n not in ("best", "all", "momentum", "buy-and-hold")]
    return paired(gap("best", "buy-and-hold")), f"{min(means):+.2f} to {max(means):+.2f}" if means else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=seeds_of, default=seeds_of("100-109"), help="development market seeds")
    parser.add_argument("--set", "-s", dest="overrides", action="append", default=[],
                        help="override a params.yaml key for every run")
    parser.add_argument("--jobs", type=int, default=2, help="seeds trained side by side")
    parser.add_argument("--json", type=Path, help="write every row here")
    parser.add_argument("--merge", type=Path, help="table the rows of an earlier --json run instead of running")
    parser.add_argument("--out", type=Path, default=ARCHIVE, help="record the table here")
    args = parser.parse_args()
    if args.merge:
        result = json.loads(args.merge.read_text())
    else:
        started = time.perf_counter()
        with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
            rows = [r for part in pool.imap(run_seed, [(s, args.overrides) for s in args.seeds]) for r in part]
        result = {"command": " ".join([".venv/bin/python -m benchmarks.archive.selection", *sys.argv[1:]]),
                  "minutes": (time.perf_counter() - started) / 60, "rows": rows}
        if args.json:
            args.json.write_text(json.dumps(result, indent=1))
    stamp = now()
    text = "\n".join(table(result["rows"]))
    print(text)
    seeds = sorted({r["seed"] for r in result["rows"]})
    record(Reading(
        "selection", "Selection rules: the best snapshot against ensembles",
        f"Learnable market, params.yaml's evolution, {result['minutes']:.0f} min on 2 cores. "
        f"Test Sharpe; validation is what the rule selected on.\n\n    {result['command']}\n\n{text}",
        ("date", "commit", "command", "seeds", "best: test − B&H", "ensembles: test − best"),
        (stamp, commit(), f"`{result['command']}`", f"{seeds[0]}–{seeds[-1]}", *history_row(result["rows"]))), args.out)


if __name__ == "__main__":
    main()
