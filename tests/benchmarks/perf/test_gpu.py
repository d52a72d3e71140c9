"""benchmarks/perf/gpu.py, the device script: every section at toy sizes on the CPU (what a GPU
machine runs at full size), its configs against params.paper.yaml, its byte counts by hand,
and the report of a device run."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import torch

from benchmarks.perf import gpu, gpu_train, gpu_update
from benchmarks.perf.gpu import BUDGET, SECTIONS, necessary_bytes, orchestrate
from benchmarks.perf.gpu_common import HEADLINE, TINY, Args, bytes_moved, necessary_update_bytes, paper_env, paper_ppo
from benchmarks.perf.gpu_market import sample_market
from benchmarks.perf.gpu_report import device_line, headline_text, ppo_table, record_run
from benchmarks.perf.gpu_update import update_table
from standins.device import device_python
from tasks.config import load_params
from tests.conftest import REPO
from trainers.ppo import kernel


@pytest.mark.slow
def test_every_section_runs_at_toy_sizes_and_writes_its_json(tmp_path: Path) -> None:
    """In an environment with only the GPU machine's packages (standins/device.py): an import
    of anything else fails here as it would there."""
    out = tmp_path / "out"
    python = device_python(tmp_path / "device")
    done = subprocess.run([str(python), "-m", "benchmarks.perf.gpu", "--device", "cpu", "--tiny", "--out", str(out),
                           "--deadline", "400"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    results = {name: json.loads((out / f"{name}.json").read_text()) for name in SECTIONS}
    assert all(results[name]["ok"] for name in SECTIONS), {n: r.get("error") for n, r in results.items()}
    assert results["sync"]["all_ok"] and len(results["sync"]["steps"]) == 4
    assert {row["mode"] for row in results["env"]["rows"]} == {"eager", "inductor"}  # no CUDA graphs on a CPU
    assert all(row["steps_per_s"] > 0 for row in results["env"]["rows"])
    assert results["parity"]["same_best_agent"] and results["parity"]["max_fitness_diff"] < 1e-6
    dask = results["dask"]  # two worker processes of a real scheduler, as in-process, bit for bit
    assert dask["identical"] and len(dask["jobs_by_worker"]) == 2 and sum(dask["jobs_by_worker"].values()) == 4
    headline = results["headline"]
    assert headline["env_steps"] > 0 and {"agent", "buy_and_hold", "momentum", "session_momentum"} <= set(
        headline["test"])
    session = headline["test"]["session_momentum"]  # the lookback with the best validation Sharpe
    assert session["validation_sharpes"][str(session["lookback_sessions"])] == max(
        session["validation_sharpes"].values())
    assert headline["chunked_evaluation"]["chunked"][0]["chunks"] == 64
    assert sum(headline["compiled_split"]["shares_of_generation"].values()) == pytest.approx(1.0)
    split = headline["compiled_split"]  # 2 agents × 4 envs × 8 steps in one rollout, at the rollout's pace
    assert split["rollout_env_steps"] == 64
    assert split["rollout_env_steps_per_s"] == pytest.approx(64 / split["seconds"]["rollout"])
    start = split["generation_start"]  # the next generation on the kept PPO, and on a new one
    assert start["reloaded"] and start["kept_seconds"] > 0
    assert start["saved_seconds"] == pytest.approx(start["rebuilt_seconds"] - start["kept_seconds"])
    text = headline_text(results)  # the report's lines for them
    assert "A generation as it runs" in text and "with the policy in the loop" in text and "kept and reloaded" in text
    assert split["seconds"]["first_evaluation"] > 0 and "records its decision" in text
    assert "chunks side by side" in text and "session-momentum" in text
    assert "| fused |" in update_table(results["update"])
    assert sum(headline["profile"]["shares_of_wall"].values()) == pytest.approx(1.0, abs=0.02)
    update = {row["form"]: row for row in results["update"]["rows"]}  # the fused form moves fewer bytes compiled
    assert update["fused"]["compiled_bytes"] < update["matmul"]["compiled_bytes"] < update["matmul"]["eager_bytes"]
    assert update["kernel"]["compiled_bytes"] < update["fused"]["compiled_bytes"] and "| kernel |" in update_table(
        results["update"])  # the kernel, in Triton's interpreter here: fewer bytes still, autograd's gradients
    assert update["kernel"]["kernel_error"] < 1e-5 and "compiled_loss_s" not in update["kernel"]
    assert len(list(out.iterdir())) <= 8  # what a device run can hand back
    assert results["device"]["triton"] == metadata.version("triton")  # the kernel's compiler, named
    assert results["device"]["numpy"] == metadata.version("numpy")  # its interpreter's, on a CPU
    assert f", Triton {results['device']['triton']}: measured copy" in device_line(results)


def test_a_section_keeps_its_device_budget_but_the_cpu_smoke_takes_what_the_deadline_leaves(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    timeouts: list[float] = []

    def run(command: list[str], check: bool, timeout: float, cwd: Path) -> None:
        timeouts.append(timeout)

    monkeypatch.setattr(gpu.subprocess, "run", run)
    for tiny in (False, True):
        timeouts.clear()
        orchestrate(Args("cpu", tiny, tmp_path, time.monotonic() + 400, 5.0), ["env"])
        assert timeouts[0] == (pytest.approx(400 - 5 + 10, abs=1) if tiny else BUDGET["env"] + 10)


def test_a_section_killed_at_its_budget_keeps_what_it_saved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = Args("cuda", False, tmp_path, time.monotonic() + 400, 5.0)

    def run(command: list[str], check: bool, timeout: float, cwd: Path) -> None:
        args.save("update", {"rows": [{"form": "kernel", "sample_epochs_per_s": 3e6}]})  # its first form, then
        raise subprocess.TimeoutExpired(command, timeout)

    monkeypatch.setattr(gpu.subprocess, "run", run)
    done = orchestrate(args, ["update"])["update"]
    assert done["rows"] == [{"form": "kernel", "sample_epochs_per_s": 3e6}] and not done["ok"]
    assert done["error"] == f"timed out after {BUDGET['update']:.0f} s" and args.load("update") == done
    assert [p.name for p in tmp_path.iterdir()] == ["update.json"]  # no half-written file left beside it


def test_its_configs_are_params_paper_yamls() -> None:
    paper = load_params(REPO / "params.paper.yaml")
    assert paper_env() == paper.env
    shapes = {"num_envs", "horizon", "batch_size", "repeat_times"}
    assert {k: v for k, v in asdict(paper_ppo()).items() if k not in shapes} == {
        k: v for k, v in asdict(paper.ppo).items() if k not in shapes}
    # the headline scales the envs and minibatch up, but makes params.paper.yaml's passes over each rollout
    assert HEADLINE["repeat_times"] == paper.ppo.repeat_times == 2


def test_bytes_are_counted_op_by_op_by_hand() -> None:
    a, b = torch.ones(10), torch.ones(10)
    assert bytes_moved(lambda: a + b) == 3 * 40  # two inputs read, one output written
    rows, index = torch.ones(100, 8), torch.tensor([3, 5])
    assert bytes_moved(lambda: rows.index_select(0, index)) == 2 * (2 * 8 * 4) + 2 * 8  # the rows taken, the index
    assert bytes_moved(lambda: rows.view(800)) == 0
    # 100 stocks: the account in and out (4 × 8 + 100 × 8 each), the float32 action, the open and
    # the close, the state row in and out
    assert necessary_bytes(100, 501) == 2 * (32 + 800) + 400 + 1600 + 2 * 501 * 4


def test_the_updates_necessary_bytes_by_hand() -> None:
    # 100 stocks of 3 features: a 501-float state, 100 actions, per-stock log-probabilities and
    # advantages, one value target, 4 bytes each
    assert necessary_update_bytes(100, 501, per_action=True) == 4 * (501 + 100 + 100 + 100 + 1) == 3208
    assert necessary_update_bytes(100, 501, per_action=False) == 4 * (501 + 100 + 1 + 1 + 1)


def test_asking_the_update_benchmark_for_help_measures_and_records_nothing(monkeypatch, capsys) -> None:
    def measured(*args: object) -> None:
        raise AssertionError("--help ran the benchmark")

    monkeypatch.setattr(gpu_update, "section_update", measured)
    monkeypatch.setattr("benchmarks.common.record", measured)
    monkeypatch.setattr(sys, "argv", ["gpu_update", "--help"])
    with pytest.raises(SystemExit) as done:
        gpu_update.main()
    assert done.value.code == 0 and "bytes one PPO update moves" in " ".join(capsys.readouterr().out.split())


def test_a_device_run_is_recorded_with_its_device_name(tmp_path: Path) -> None:
    docs, image = tmp_path / "benchmarks.md", tmp_path / "gpu.png"
    record_run(REPO / "docs" / "results" / "gpu-h100", REPO / "docs" / "results" / "gpu-cpu", docs, image)
    text = docs.read_text()
    assert "NVIDIA H100 80GB HBM3" in text and "<!-- benchmark: gpu -->" in text and image.exists()
    env = json.loads((REPO / "docs" / "results" / "gpu-h100" / "env.json").read_text())
    inductor = next(r for r in env["rows"] if r["envs"] == 16384 and r["mode"] == "inductor")
    assert f"| 16,384 | Inductor + CUDA graphs | {inductor['steps_per_s'] / 1e6:,.1f} M |" in text  # as measured
    assert "pinned to GPU 0, trained 8 jobs (4 + 4 by worker" in text and "bit for bit the same" in text
    assert f" at {env['commit']}; every run's row" in text  # the reading names the run's commit
    assert f"| {env['commit']} | NVIDIA H100 80GB HBM3 |" in (tmp_path / "history" / "README.md").read_text()


def test_the_ppo_table_has_a_row_a_size_and_each_modes_figures_side_by_side() -> None:
    gpu = {"device": {"fp32_matmul_tflops": 50.0}, "ppo": {"rows": [
        {"stocks": 30, "agents": 4, "mode": "graphs", "samples_per_s": 80_000.0, "rollout_share": 0.25,
         "update_tflops": 0.5},
        {"stocks": 30, "agents": 4, "mode": "eager", "samples_per_s": 20_000.0, "rollout_share": 0.5,
         "update_tflops": 0.1},
        {"stocks": 100, "agents": 1, "mode": "eager", "error": "out of memory"}]}}
    cpu = {"ppo": {"rows": [{"stocks": 30, "agents": 4, "samples_per_s": 10_000.0}]}}
    text = ppo_table(gpu, cpu)
    assert text.startswith("Each figure for eager · CUDA graphs.")
    # 0.1 / 50 TFLOP/s is 0.2%; 20,000 / 10,000 samples/s is 2x and 80,000 / 10,000 is 8x
    assert "| 30 | 4 | 20,000 · 80,000 | 50% · 25% | 0.10 · 0.50 | 0.2% · 1.0% | 10,000 | 2x · 8x |" in text
    assert "| 100 | 1 | failed · - | - · - | - · - | - · - | - | - · - |" in text


def test_the_headline_trains_with_the_kernel_only_where_the_update_section_found_it_right_and_faster(
        tmp_path: Path) -> None:
    args = Args("cuda", False, tmp_path, time.monotonic() + 400, 5.0)
    assert gpu_train._modes(args) == ["inductor", "graphs"]  # no update section: nothing known of the kernel

    def update(kernel: dict[str, float]) -> list[str]:
        args.save("update", {"rows": [{"form": "fused", "sample_epochs_per_s": 2e6}, {"form": "kernel", **kernel}]})
        return gpu_train._modes(args)

    assert update({"sample_epochs_per_s": 3e6, "kernel_error": 1e-7}) == ["kernel", "inductor", "graphs"]
    assert update({"sample_epochs_per_s": 1e6, "kernel_error": 1e-7}) == ["inductor", "graphs"]  # slower
    assert update({"sample_epochs_per_s": 3e6, "kernel_error": 1e-2}) == ["inductor", "graphs"]  # wrong
    assert update({"error": "CompilationError"}) == ["inductor", "graphs"]
    args.save("env", {"rows": [{"mode": "inductor", "error": "failed"}]})
    assert update({"sample_epochs_per_s": 3e6, "kernel_error": 1e-7}) == ["graphs"]
    assert gpu_train._modes(Args("cpu", False, tmp_path, time.monotonic() + 400, 5.0)) == ["eager"]


def test_the_fastest_kernel_build_is_one_whose_gradients_are_autograds() -> None:
    shape = {"block": 32, "stocks": 4, "chunk": 32}
    fast_wrong = {"warps": 4, "dot": "tf32x3", "stages": 1, **shape, "loss_s": 0.001, "kernel_error": 2e-4}
    rows = [{**kernel.LAUNCHES[0]._asdict(), "loss_s": 0.009, "kernel_error": 1e-7},
            {"warps": 4, "dot": "ieee", "stages": 1, **shape, "loss_s": 0.004, "kernel_error": 1e-7}, fast_wrong,
            {"warps": 4, "dot": "tf32x3", "stages": 3, **shape, "error": "CompilationError"}]
    assert gpu_update.fastest_launch(rows) == kernel.Launch(4, "ieee", 1, 32, 4, 32)
    assert gpu_update.fastest_launch([fast_wrong | {"kernel_error": 1e-4}]) == kernel.Launch(4, "tf32x3", 1, 32, 4, 32)
    assert gpu_update.fastest_launch([fast_wrong, rows[-1]]) is None


def test_the_update_is_timed_with_the_fastest_right_build_of_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """The update section's rate for the kernel (on CUDA there; here in Triton's interpreter, the
    rollout left uncompiled): every build of the kernel is run and checked on the rollout's samples
    before the update records its steps, and every later launch is the chosen build's."""
    if not kernel.runs_on(torch.device("cpu")):
        pytest.skip("Triton's interpreter is not available")
    monkeypatch.setattr("trainers.ppo.ppo.compiled", lambda fn, mode: fn)
    built, run = [], kernel._run
    monkeypatch.setattr(kernel, "_run", lambda *a: built.append(kernel.LAUNCH) or run(*a))
    monkeypatch.setattr(kernel, "LAUNCHES", kernel.LAUNCHES[::3])  # three builds of the eight, for the time
    chosen = kernel.LAUNCHES[2]
    assert chosen.block == 32  # the other shape of work, whose sums run in another order
    monkeypatch.setattr(gpu_update, "fastest_launch", lambda rows: chosen if len(rows) == 3 else None)
    args = Args("cpu", True, Path("."), time.monotonic() + 400, 5.0)
    data = sample_market(4, 300, seed=0, device="cpu")
    out = gpu_update._rate(args, data, 2, TINY, True, "kernel")
    rows = out["launches"]
    assert [kernel.Launch.of(r) for r in rows] == list(kernel.LAUNCHES)
    assert all(r["kernel_error"] < 1e-5 and r["loss_s"] > 0 for r in rows) and out["update_s"] > 0
    n = len(kernel.LAUNCHES) * 7  # each build: its first call, the check, 5 timed calls
    timed_builds = built[n:]
    assert built[:n] == [launch for launch in kernel.LAUNCHES for _ in range(7)]
    assert timed_builds and set(timed_builds) == {chosen} and out["launch"] == chosen._asdict()
    assert kernel.LAUNCH == kernel.LAUNCHES[0]  # the shipped build again afterwards


def test_the_headline_builds_the_kernel_as_the_update_section_timed_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernel, "LAUNCH", kernel.LAUNCH)
    args = Args("cuda", False, tmp_path, time.monotonic() + 400, 5.0)
    shipped = {"warps": 4, "dot": "ieee", "stages": 3, "block": 16, "stocks": 8, "chunk": 64}
    assert gpu_train._kernel_launch(args) == shipped  # nothing measured
    chosen = {"warps": 4, "dot": "tf32x3", "stages": 1, "block": 32, "stocks": 4, "chunk": 32}
    args.save("update", {"rows": [{"form": "kernel", "launch": chosen}]})
    assert gpu_train._kernel_launch(args) == chosen
    assert kernel.LAUNCH == (4, "tf32x3", 1, 32, 4, 32)


def test_a_device_run_trained_with_the_kernel_is_reported_with_its_build(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(REPO / "docs" / "results" / "gpu-h100", run)
    headline = json.loads((run / "headline.json").read_text())
    (run / "headline.json").write_text(json.dumps(headline | {"mode": "kernel",
                                                              "kernel_launch": {"warps": 4, "dot": "tf32x3",
                                                                                "stages": 1, "block": 32,
                                                                                "stocks": 4, "chunk": 32}}))
    kernel_row = {"form": "kernel", "compiled_bytes": 4204.0, "necessary_bytes": 3208, "eager_bytes": None,
                  "kernel_error": 1e-7, "compiled_loss_s": 0.002, "sample_epochs_per_s": 9e7, "update_s": 0.1,
                  "launch": {"warps": 4, "dot": "tf32x3", "stages": 1, "block": 32, "stocks": 4, "chunk": 32},
                  "launches": [{"warps": 4, "dot": "ieee", "stages": 3, "first_call_s": 3.1, "loss_s": 0.0051,
                                "kernel_error": 1e-7},  # recorded before the shape's fields: the shipped shape
                               {"warps": 4, "dot": "tf32x3", "stages": 1, "block": 32, "stocks": 4, "chunk": 32,
                                "error": "CompilationError: x"}]}
    (run / "update.json").write_text(json.dumps({"ok": True, "agents": 16, "stocks": 100, "shapes": {},
                                                 "rows": [kernel_row]}))
    docs = tmp_path / "benchmarks.md"
    record_run(run, REPO / "docs" / "results" / "gpu-cpu", docs, tmp_path / "gpu.png")
    text = docs.read_text()
    assert ("the update's Triton kernel + Inductor + CUDA graphs (4 warps, `tf32x3` matmuls, 1 stage, 32 samples "
            "× 4 stocks at a time, the state 32 entries at a time)") in text
    assert "| 4 | ieee | 3 | 16 × 8, 64 | 3.10 | 5.10 | 1.0e-07 |" in text
    assert "| 4 | tf32x3 | 1 | 32 × 4, 32 | failed: CompilationError: x |" in text


def test_a_mode_that_fails_leaves_the_next_what_the_deadline_leaves(tmp_path: Path) -> None:
    args = Args("cuda", False, tmp_path, time.monotonic() + 400, 150.0)
    budgets: list[float] = []

    def train(mode: str, budget: float) -> Any:
        budgets.append(budget)
        if mode == "kernel":
            time.sleep(0.2)  # trained a while, then failed
            raise RuntimeError("CUDA graph capture failed")
        return mode, []

    out: dict[str, Any] = {}
    assert gpu_train._first_that_trains(args, ["kernel", "inductor", "graphs"], out, train) == ("inductor", [])
    assert out["mode"] == "inductor" and out["fallbacks"] == ["kernel: RuntimeError: CUDA graph capture failed"]
    assert budgets[0] == 150.0  # the whole budget while the deadline has room
    args = Args("cuda", False, tmp_path, time.monotonic() + 250, 150.0)
    budgets.clear()
    gpu_train._first_that_trains(args, ["kernel", "inductor"], {}, train)
    assert budgets[0] == pytest.approx(100, abs=0.1) and budgets[1] == pytest.approx(budgets[0] - 0.2, abs=0.05)
    with pytest.raises(RuntimeError, match="every mode failed"):
        gpu_train._first_that_trains(args, ["kernel"], {}, train)
