"""`dvc repro` runs the same stages through the CLI, in a fresh git repo."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from standins.tiny import TINY
from tests.conftest import REPO


@pytest.mark.slow
def test_dvc_repro_runs_the_stages(tmp_path):
    for name in ("dvc.yaml", ".dvcignore", ".gitignore"):
        shutil.copy(REPO / name, tmp_path / name)
    shutil.copytree(REPO / ".dvc", tmp_path / ".dvc", ignore=shutil.ignore_patterns("tmp", "cache"))
    for code in ("tasks", "trainers"):  # the stages' code folders are deps
        shutil.copytree(REPO / code, tmp_path / code, ignore=shutil.ignore_patterns("__pycache__"))
    tree: dict = yaml.safe_load((REPO / "params.yaml").read_text())
    for assignment in TINY:
        key, value = assignment.split("=", 1)
        *parents, leaf = key.split(".")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = yaml.safe_load(value)
    # DVC rejects YAML dates in params, so dates stay quoted strings (as in params.yaml).
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(json.loads(json.dumps(tree, default=str))))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    dvc = [sys.executable, "-m", "dvc"]
    done = subprocess.run([*dvc, "repro"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for stage in ("ingest", "validate", "features", "train", "backtest", "register"):
        assert f"Running stage '{stage}'" in done.stdout
    metrics = json.loads((tmp_path / "data" / "backtest" / "metrics.json").read_text())
    assert "sharpe" in metrics["agent"]
    assert (tmp_path / "dvc.lock").exists() and (tmp_path / "mlflow" / "mlflow.db").exists()
    again = subprocess.run([*dvc, "repro"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert again.returncode == 0 and "Running stage" not in again.stdout  # nothing changed
