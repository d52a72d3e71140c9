"""The paper's scale end to end on CPU (finrl-podracer §5): 100 stocks x 10 years of 1-minute bars.

Runs ``podracer ingest``, ``validate``, ``features``, ``train``, ``backtest``, ``register`` and
``deliver`` with ``params.paper.yaml`` (about 98 M rows, 16 generations of 4 agents, 2023 as
the test year), each stage in a process of its own, and measures its wall time and peak RSS
(``os.wait4``'s rusage of that process). The point is that nothing before or after training is
the bottleneck; the paper's GPU training is docs/benchmarks.md's GPU section. The test year's
result is printed beside buy-and-hold and a momentum rule (the top third by 20-bar return,
rebalanced every ``env.decide_every`` bars under the env's fill rule, ``benchmarks/rules.py``),
never tuned to. Prints the table and records it in docs/benchmarks.md.

    .venv/bin/python -m benchmarks.perf.paper                 # about 25 minutes on 2 cores; data/paper/
    .venv/bin/python -m benchmarks.perf.paper --from train    # reuse the data stages' output
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time

from benchmarks.common import ROOT, Reading, commit, now, record
from flows.stage_table import COMMANDS

PARAMS = "params.paper.yaml"
STAGES = tuple(stage.name for stage in COMMANDS)
DATA_STAGES = STAGES[:3]
TARGET = "ingest + validate + features <= 10 min and <= 8 GiB peak RSS on 2 cores (aim 5 min, 4 GiB)"
DONE = re.compile(r"^✓ .*", re.MULTILINE)


def run_stage(stage: str, overrides: list[str]) -> dict[str, object]:
    """One CLI stage in a child process: wall seconds, the child's peak RSS and its ✓ line."""
    args = [sys.executable, "-m", "flows.cli", stage, "-p", PARAMS, *(x for o in overrides for x in ("-s", o))]
    env = {**os.environ, "COLUMNS": "200", "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "600"}
    started = time.monotonic()
    with subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as child:
        assert child.stdout is not None
        lines = []
        for line in child.stdout:  # streamed, so a long stage shows its progress
            print(f"  {stage}: {line}", end="", flush=True)
            lines.append(line)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.monotonic() - started
    output = "".join(lines)
    if child.returncode != 0:
        raise SystemExit(f"{stage} failed (exit {child.returncode}):\n{output[-3000:]}")
    found = DONE.findall(output)
    return {"stage": stage, "seconds": seconds, "peak_rss_gib": usage.ru_maxrss / 2**20,
            "result": found[-1].removeprefix("✓ ").replace("\n", " ") if found else ""}


def test_year(overrides: list[str]) -> dict[str, dict[str, float]]:
    """The test year: the agent and buy-and-hold from the backtest's metrics, and the momentum rule."""
    from benchmarks.rules import momentum_scores, ranked_portfolio
    from tasks.config import load_params
    from tasks.data import feature_set
    from trainers.common.metrics import performance, periods_per_year

    params = load_params(ROOT / PARAMS, overrides)
    metrics = json.loads((params.dirs.backtest / "metrics.json").read_text())
    fs = feature_set.load(params.dirs.features)
    data = fs.market()
    window = fs.window("test")
    values = ranked_portfolio(data, params.env, window, momentum_scores(data, 20), params.env.decide_every)
    out = {name: m for name, m in metrics.items() if isinstance(m, dict)}
    out["momentum"] = performance(values, periods_per_year(params.data.freq), params.backtest.risk_free)
    return out


def tables(stages: list[dict[str, object]], year: dict[str, dict[str, float]]) -> str:
    lines = ["| stage | wall s | peak RSS GiB | result |", "|---|---|---|---|"]
    lines += [f"| {r['stage']} | {r['seconds']:.1f} | {r['peak_rss_gib']:.2f} | {r['result']} |" for r in stages]
    data = [r for r in stages if r["stage"] in DATA_STAGES]
    if len(data) == len(DATA_STAGES):
        lines.append(f"| data layer (ingest + validate + features) | {sum(float(r['seconds']) for r in data):.1f} | "
                     f"{max(float(r['peak_rss_gib']) for r in data):.2f} | |")
    lines += ["", "| test year | Sharpe | annual return | max drawdown |", "|---|---|---|---|"]
    lines += [f"| {name.replace('_', '-')} | {m['sharpe']:.2f} | {m['annual_return']:.2%} | {m['max_drawdown']:.2%} |"
              for name, m in year.items()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="first", choices=STAGES, default=STAGES[0],
                        help="start at this stage, reusing the earlier stages' output")
    parser.add_argument("-s", "--set", dest="overrides", action="append", default=[], help="KEY=VALUE override")
    args = parser.parse_args()
    stages = [run_stage(stage, args.overrides) for stage in STAGES[STAGES.index(args.first):]]
    text = tables(stages, test_year(args.overrides))
    print(text)
    command = "make install && .venv/bin/python -m benchmarks.perf.paper" + (
        f" --from {args.first}" if args.first != STAGES[0] else "") + "".join(f" -s {o}" for o in args.overrides)
    stamp = now()
    by_stage = {str(r["stage"]): r for r in stages}
    data_s = sum(float(by_stage[s]["seconds"]) for s in DATA_STAGES if s in by_stage)
    record(Reading(
        "paper", "Paper scale: 100 stocks x 10 years of minute bars, end to end",
        f"Command: `{command}` (config `{PARAMS}`)  \nMachine: {os.cpu_count()} CPUs, "
        f"{platform.machine()}, Python {platform.python_version()}. Target: {TARGET}.\n\n{text}",
        ("date", "commit", "command", "data layer s", "train s", "whole run s"),
        (stamp, commit(), f"`{command}`", f"{data_s:.0f}" if data_s else "-",
         f"{float(by_stage['train']['seconds']):.0f}" if "train" in by_stage else "-",
         f"{sum(float(r['seconds']) for r in stages):.0f}")))


if __name__ == "__main__":
    main()
