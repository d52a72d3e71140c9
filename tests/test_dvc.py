"""``dvc.yaml`` is the stage table's (flows/stage_table.py): each DVC stage runs its stage's
command and lists what the stage reads; and ``dvc repro`` runs the stages through the CLI,
in a fresh git repo."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest
import yaml

from flows.stage_table import STAGES
from standins.tiny import TINY
from tasks.config import apply_override, load_params
from tests.conftest import REPO


def dvc_stages(text: str | None = None) -> dict[str, dict]:
    return yaml.safe_load(text if text is not None else (REPO / "dvc.yaml").read_text())["stages"]


def undeclared(name: str, stage: dict) -> list[str]:
    """What the table says stage ``name`` reads (with params.yaml's paths), and the code folder of
    its function, that no dependency of the DVC stage covers (names it or a folder above it)."""
    deps = [PurePosixPath(dep) for dep in stage.get("deps", [])]
    params = load_params(REPO / "params.yaml")
    code = PurePosixPath(*STAGES[name].runs.split(":")[0].split(".")[:2])  # tasks/<part>
    wanted = [PurePosixPath(path.as_posix()) for path in STAGES[name].reads(params)] + [code]
    return [str(path) for path in wanted if not any(path == dep or dep in path.parents for dep in deps)]


def test_every_dvc_stage_is_a_stage_of_the_table_and_runs_its_command():
    stages = dvc_stages()
    assert list(stages) == [s.name for s in STAGES.values() if s.command and s.repro]
    assert {name: stage["cmd"] for name, stage in stages.items()} == {name: f"podracer {name}" for name in stages}


def test_every_dvc_stage_lists_what_its_stage_reads():
    missing = {name: gaps for name, stage in dvc_stages().items() if (gaps := undeclared(name, stage))}
    assert missing == {}


def test_the_register_stage_declares_the_backtest_and_the_registry_store_it_reads():
    """The gate inside ``podracer register`` reads the backtest's equity curve and faces the
    champion sitting in the registry store (params.yaml ``registry:``): without them as deps,
    ``dvc repro`` would not run it again when either changes."""
    params = load_params(REPO / "params.yaml")
    reads = STAGES["register"].reads(params)
    for path in (params.dirs.backtest / "equity.csv", Path("mlflow/mlflow.db"), params.registry.artifact_root):
        assert path in reads
    assert undeclared("register", dvc_stages()["register"]) == []


@pytest.mark.slow
def test_dvc_repro_runs_the_stages(tmp_path):
    for name in ("dvc.yaml", ".dvcignore", ".gitignore"):
        shutil.copy(REPO / name, tmp_path / name)
    shutil.copytree(REPO / ".dvc", tmp_path / ".dvc", ignore=shutil.ignore_patterns("tmp", "cache"))
    for code in ("tasks", "trainers"):  # the stages' code folders are deps
        shutil.copytree(REPO / code, tmp_path / code, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "mlflow").mkdir()  # the registry store, a dep of register: a fresh clone has its README
    shutil.copy(REPO / "mlflow" / "README.md", tmp_path / "mlflow" / "README.md")
    tree: dict = yaml.safe_load((REPO / "params.yaml").read_text())
    for assignment in TINY:
        apply_override(tree, assignment)
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
