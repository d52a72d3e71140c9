"""The 2-core agent beside the GPU headline (benchmarks/perf/gpu_two_core.py): params.paper.yaml's
budget on the headline's market, its test year written for the record, and the record's line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from benchmarks.perf.gpu_report import two_core_text
from benchmarks.perf.gpu_two_core import BUDGET, PASSES
from tasks.config import load_params
from tests.conftest import REPO


def test_its_budget_is_params_paper_yamls() -> None:
    paper = load_params(REPO / "params.paper.yaml")
    assert {k: getattr(paper.evolution, k) for k in BUDGET} == BUDGET
    assert PASSES == paper.ppo.repeat_times


def test_it_trains_on_the_cpu_and_writes_its_test_year_for_the_record(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks.perf.gpu_two_core", "--tiny", "--out", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    two = json.loads((tmp_path / "two_core.json").read_text())
    # --tiny: 2 agents, 2 generations of 1 iteration of 4 envs × 8 steps
    assert two["env_steps"] == 2 * 2 * 4 * 8 and two["threads"] == 2
    assert {"agent", "buy_and_hold"} <= set(two["test"]) and two["tree"]["commit"]
    line = two_core_text({"two_core": two})
    assert f"test Sharpe {two['test']['agent']['sharpe']:.2f}, buy-and-hold" in line
    assert "0.0 M env steps" in line and "on 2 CPU cores" in line
    assert two_core_text(None) == "" and two_core_text({"env": {}}) == ""
