"""`podracer train --resume` after the training process is killed mid-run."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from standins.tiny import TINY, tiny_params
from tasks.model import bundle
from tasks.model.plan import checkpoint_dir
from tasks.model.train import train
from tests.conftest import REPO
from trainers.population.dispatch import set_deterministic
from trainers.population.evolution import CHECKPOINT

LONGER = ["evolution.generations=4", "evolution.iterations_per_generation=3"]


def cli(root: Path, *extra: str) -> list[str]:
    overrides = [*TINY, *LONGER, f"data_dir={root / 'data'}"]
    return [sys.executable, "-m", "flows.cli", "train", "-p", "/nonexistent/params.yaml",
            *[arg for o in overrides for arg in ("-s", o)], *extra]


@pytest.mark.slow
def test_a_killed_training_run_resumes_to_the_uninterrupted_result(built_copy, tmp_path):
    params = tiny_params(tmp_path, *LONGER)
    straight = train(params)
    expected = torch.load(straight.model_dir / bundle.WEIGHTS, weights_only=True)

    ckpt = checkpoint_dir(params) / CHECKPOINT
    ckpt.unlink()
    proc = subprocess.Popen(cli(tmp_path), cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while not ckpt.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "training finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)  # dies somewhere after generation 0
    proc.wait()
    resumed = subprocess.run(cli(tmp_path, "--resume"), cwd=REPO, capture_output=True,
                             text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    weights = torch.load(params.dirs.models / bundle.WEIGHTS, weights_only=True)
    assert all(torch.equal(expected[k], weights[k]) for k in expected)
    # The summary counts the whole run's env steps, and says how many of them ran after resuming.
    said = re.search(r"([\d,]+) env steps, ([\d,]+) of them after resuming in", " ".join(resumed.stdout.split()))
    assert said, resumed.stdout[-2000:]
    total, after = (int(x.replace(",", "")) for x in said.groups())
    assert total == straight.env_steps and 0 < after < total


def test_resume_without_a_checkpoint_is_one_line(built_copy, tmp_path):
    done = subprocess.run(cli(tmp_path, "--resume"), cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1
    assert "no checkpoint of this run" in done.stdout and "Traceback" not in done.stdout + done.stderr


def test_train_deterministic_turns_on_deterministic_kernels(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    try:
        set_deterministic(True)
        assert torch.are_deterministic_algorithms_enabled()
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    finally:
        set_deterministic(False)
    assert not torch.are_deterministic_algorithms_enabled()
