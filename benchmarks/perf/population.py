"""Benchmark of one-device multiplexing (docs/evolution.md, Engines): a population trained as
one batched model (``trainers.ppo.multiplex.run_multiplexed``) against the same agents trained one after another
(``trainers.population.evolution.run_serially``), side by side in one run on the same data.

Population throughput is the population's env steps (training samples) per second of wall
time for one generation: ``iterations`` PPO iterations per agent and an evaluation of every
agent on the validation window at the end, as the evolution runs them. Each engine runs
``repeats`` times, interleaved, and the median is reported; both start from the same jobs,
and the table also gives the largest weight difference between their results (the same
agents up to float summation order).

Populations:
* ``default``: ``params.yaml``'s search space: widths, env counts and repeat times differ;
* ``uniform``: every agent with the PPO defaults (Table 3): the same shapes, no padding.

    make install && .venv/bin/python -m benchmarks.perf.population          # about 10 minutes on 2 cores
    .venv/bin/python -m benchmarks.perf.population --sizes 8 --repeats 1    # quicker

On a GPU machine, benchmarks/perf/gpu.py's ``ppo`` section measures a batched population by size.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch
from matplotlib.figure import Figure

from benchmarks.common import ROOT, Reading, commit, now, record
from trainers.common.env import MarketData
from trainers.common.jobs import AgentJob
from trainers.common.state import StateScales
from trainers.config import EnvConfig, PPOConfig
from trainers.population.config import EvolutionConfig
from trainers.population.evolution import Evolution, run_serially
from trainers.ppo.multiplex import run_multiplexed

TARGET = ">= 3x population throughput on CPU (multiplexed vs one agent after another)"


def pipeline_market(device: str) -> dict:
    """The default embedded market through stages 1–3 in a temp folder, as tensors + configs."""
    import tempfile

    from benchmarks.common import default_features

    with tempfile.TemporaryDirectory() as tmp:
        params, fs = default_features(Path(tmp))
        data = fs.market("cpu")
        market = {"open": data.open, "close": data.close, "features": data.features, "turbulence": data.turbulence,
                  "train": fs.window("train"), "validation": fs.window("validation"),
                  "env": asdict(params.env), "ppo": asdict(params.ppo), "evolution": asdict(params.evolution)}
    return market


def jobs_for(market: dict, population: int, uniform: bool, device: str) -> tuple[list[AgentJob], object]:
    """The first generation's jobs of a population on ``market``, and their Setting."""
    data = MarketData(*(market[k].to(device) if market[k] is not None else None
                        for k in ("open", "close", "features", "turbulence")))
    env = EnvConfig(**market["env"])
    ppo = PPOConfig(**{**market["ppo"], "net_dims": tuple(market["ppo"]["net_dims"])})
    raw = market["evolution"]
    evo = EvolutionConfig(**{**raw, "perturb_factors": tuple(raw["perturb_factors"]), "population": population,
                             "search_space": {} if uniform else {k: tuple(v) for k, v in raw["search_space"].items()}})
    first = market["train"][0]
    scales = StateScales(1 / env.initial_cash, 1 / env.hmax, tuple(data.close[first].tolist()))
    run = Evolution(data, scales, env, ppo, evo, tuple(market["train"]), tuple(market["validation"]), 252.0)
    pop = run.state
    jobs = [AgentJob(0, i, pop.hparams[i], pop.seeds[i], pop.states[i], pop.best[i], pop.last[i], pop.falls[i], None)
            for i in range(population)]
    return jobs, run.setting


def timed(runner, jobs, setting, device: str) -> tuple[float, list[AgentJob]]:
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    done = runner(jobs, setting)
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start, done


def largest_difference(a: list[AgentJob], b: list[AgentJob]) -> float:
    return max(float((x.state["learners"][0]["actor"][k] - y.state["learners"][0]["actor"][k]).abs().max())
               for x, y in zip(a, b) for k in x.state["learners"][0]["actor"])


def measure(market: dict, population: int, uniform: bool, iterations: int, repeats: int, device: str) -> dict:
    jobs, setting = jobs_for(market, population, uniform, device)
    setting = dataclasses.replace(setting, iterations=iterations, eval_interval=iterations)
    steps = sum(setting.ppo_cfg.with_hparams(j.hparams).num_envs * setting.ppo_cfg.horizon for j in jobs) * iterations
    serial, multiplexed = [], []
    for _ in range(repeats):  # interleaved, so drift in the machine's speed hits both alike
        t, alone = timed(run_serially, jobs, setting, device)
        serial.append(t)
        t, batched = timed(run_multiplexed, jobs, setting, device)
        multiplexed.append(t)
    s, m = statistics.median(serial), statistics.median(multiplexed)
    return {"population": population, "kind": "uniform" if uniform else "default", "env_steps": steps,
            "serial_s": s, "multiplexed_s": m, "serial_rate": steps / s, "multiplexed_rate": steps / m,
            "speedup": s / m, "max_weight_diff": largest_difference(alone, batched),
            "widths": sorted(int(j.hparams["net_width"]) for j in jobs)}


def table(rows: list[dict]) -> str:
    lines = ["| population | hparams | env steps | serial s | multiplexed s | serial steps/s | multiplexed steps/s "
             "| speedup | max weight diff |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['population']} | {r['kind']} | {r['env_steps']:,} | {r['serial_s']:.1f} | "
                     f"{r['multiplexed_s']:.1f} | {r['serial_rate']:,.0f} | {r['multiplexed_rate']:,.0f} | "
                     f"{r['speedup']:.2f}x | {r['max_weight_diff']:.1e} |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path, machine: str) -> None:
    """Population throughput of both engines by population size, uniform and default hparams."""
    figure = Figure(figsize=(9, 3.8), layout="constrained")
    for k, kind in enumerate(("uniform", "default")):
        axes = figure.add_subplot(1, 2, k + 1)
        sub = [r for r in rows if r["kind"] == kind]
        x = range(len(sub))
        axes.bar([i - 0.2 for i in x], [r["serial_rate"] for r in sub], 0.4, label="one after another")
        axes.bar([i + 0.2 for i in x], [r["multiplexed_rate"] for r in sub], 0.4, label="multiplexed")
        for i, r in zip(x, sub):
            axes.annotate(f"{r['speedup']:.2f}x", (i + 0.2, r["multiplexed_rate"]), ha="center", va="bottom",
                          fontsize=8)
        axes.set_xticks(list(x), [str(r["population"]) for r in sub])
        axes.set(xlabel="agents", ylabel="population env steps / s", title=f"{kind} hyperparameters ({machine})")
        axes.set_ylim(top=1.2 * max(r["multiplexed_rate"] for r in sub))
        axes.legend(fontsize=8, loc="lower right")
    figure.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 8, 16])
    parser.add_argument("--iterations", type=int, default=2, help="PPO iterations per agent per generation")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args()
    market = pipeline_market(args.device)
    rows = []
    for population in args.sizes:
        for uniform in (True, False):
            row = measure(market, population, uniform, args.iterations, args.repeats, args.device)
            rows.append(row)
            print(json.dumps(row), flush=True)
    name = torch.cuda.get_device_name() if args.device == "cuda" else f"{torch.get_num_threads()} CPU threads"
    command = " ".join(["-m", "benchmarks.perf.population", *sys.argv[1:]])
    text = table(rows)
    print(text)
    image = args.out.parent / "img" / f"benchmark_population_{args.device}.png"
    plot(rows, image, name)
    stamp = now()

    def speedups(kind: str) -> str:
        return ", ".join(f"{r['speedup']:.2f}x ({r['population']})" for r in rows if r["kind"] == kind)

    record(Reading(
        "population", "Population multiplexing: one batched model vs one agent after another",
        f"Command: `.venv/bin/python {command}`  \n"
        f"Machine: {name}, {platform.machine()}, torch {torch.__version__}. Target: {TARGET}.  \n"
        f"One generation of {args.iterations} PPO iterations per agent plus a validation evaluation of every "
        f"agent; median of {args.repeats} interleaved runs per engine. `default` = params.yaml's search space, "
        f"`uniform` = every agent at the PPO defaults. Plot: `docs/img/{image.name}`.\n\n{text}",
        ("date", "commit", "command", "machine", "speedup, uniform (agents)", "speedup, default (agents)"),
        (stamp, commit(), f"`.venv/bin/python {command}`", name, speedups("uniform"), speedups("default"))), args.out)


if __name__ == "__main__":
    main()
