"""The 2-core agent beside the GPU headline (benchmarks/perf/gpu_two_core.py): params.paper.yaml's
budget on the headline's market, its test year written for the record, and the record's line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from benchmarks.perf.gpu_report import two_core_text
from benchmarks.perf.gpu_train import SEARCH
from benchmarks.perf.gpu_two_core import budget
from tests.conftest import REPO


def test_its_budget_is_params_paper_yamls_with_the_headlines_search_space() -> None:
    evo, shapes = budget()
    # params.paper.yaml: 4 agents, 16 generations of 4 iterations, 32 envs × 128 steps, 2 passes of 1,024
    assert (evo.population, evo.generations, evo.iterations_per_generation, evo.eval_interval) == (4, 16, 4, 4)
    assert shapes == {"num_envs": 32, "horizon": 128, "batch_size": 1024, "repeat_times": 2}
    assert evo.search_space == SEARCH


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
