"""A continuous-training cycle killed during training: the next run of the same cycle resumes
from the checkpoint and registers exactly what an uninterrupted cycle registers (issue 13, §6)."""

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO
from tests.flows.test_cli_commands import say, tiny_project

SLOW_TRAINING = ["-s", "ct.generations=3", "-s", "evolution.iterations_per_generation=30", "-s", "ct.eval_bars=20"]


def project(root, built) -> None:
    tiny_project(root)
    shutil.copytree(built.data_dir, root / "data")
    say(root, "register")  # version 1, the champion (tiny_project's gate margin is -1000)
    say(root, "simulate", "--bars", "3")


@pytest.mark.slow
def test_a_cycle_killed_during_training_resumes_and_registers_what_an_unkilled_one_does(
        tmp_path, built, prefect_server):
    from prefect.settings import PREFECT_API_URL

    straight, killed = tmp_path / "straight", tmp_path / "killed"
    for root in (straight, killed):
        root.mkdir()
        project(root, built)
    done = say(straight, "ct", *SLOW_TRAINING)
    assert "✓ ct version 2" in done

    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, "-m", "flows.cli", "ct", *SLOW_TRAINING], cwd=killed, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    pipeline = set((killed / "data" / "checkpoints").glob("*/evolution.pt"))  # the first champion's training
    while not set((killed / "data" / "checkpoints").glob("*/evolution.pt")) - pipeline:  # generation 1 is done
        assert child.poll() is None and time.monotonic() < deadline, "the cycle ended before it could be killed"
        time.sleep(0.05)
    os.killpg(child.pid, signal.SIGKILL)
    assert child.wait(timeout=30) == -signal.SIGKILL
    assert not (killed / "data" / "ct" / "challenger").exists()  # nothing half-written

    again = subprocess.run([sys.executable, "-m", "flows.cli", "ct", *SLOW_TRAINING], cwd=killed, env=env,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    resumed = " ".join(again.stdout.split())
    assert re.search(r"challenger: warm start from the champion; best validation .* env steps, [\d,]+ of them "
                     r"after resuming in", resumed)  # it resumed, not restarted
    assert "after resuming" not in done
    assert "✓ ct version 2" in resumed
    for name in ("policy.pt", "leaderboard.csv"):
        assert (straight / "data/ct/challenger" / name).read_bytes() == \
            (killed / "data/ct/challenger" / name).read_bytes(), name
    assert resumed.split("✓ ct ")[1].split(";")[0] == done.split("✓ ct ")[1].split(";")[0]  # the same verdict
