"""benchmarks/perf/tree.py: a device run checks its own tree against the stamp written before it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from benchmarks.perf.tree import blob_hash, tree_state, write_stamp
from tests.conftest import REPO

IN_GIT = (REPO / ".git").exists()


def test_a_blob_hash_is_gits(tmp_path: Path) -> None:
    path = tmp_path / "f.txt"
    path.write_text("hello\n")
    assert blob_hash(path) == "ce013625030ba8dba906f756967f9e9ca394464a"  # `git hash-object`, by hand


def test_the_stamp_finds_a_changed_and_a_missing_file(tmp_path: Path) -> None:
    copy = tmp_path / "copy"  # a device's copy of three files, and a stamp of them
    (copy / "sub").mkdir(parents=True)
    for name, text in (("params.yaml", "a: 1\n"), ("Makefile", "all:\n"), ("sub/x.py", "x = 1\n")):
        (copy / name).write_text(text)
    stamp = tmp_path / "tree.json"
    files = {name: blob_hash(copy / name) for name in ("params.yaml", "Makefile", "sub/x.py")}
    stamp.write_text(json.dumps({"commit": "0123456789abcdef", "files": files}))
    assert tree_state(copy, stamp) == {"commit": "0123456", "clean": True, "changed": [], "checked_by": "stamp"}
    (copy / "params.yaml").write_text("a: 2\n")
    (copy / "Makefile").unlink()
    dirty = tree_state(copy, stamp)
    assert not dirty["clean"] and sorted(dirty["changed"]) == ["Makefile", "params.yaml"]


@pytest.mark.skipif(not IN_GIT, reason="stamping reads the git checkout")
def test_a_stamp_holds_heads_commit_and_its_files_blobs(tmp_path: Path) -> None:
    stamp = write_stamp(tmp_path / "tree.json")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True)
    assert stamp["commit"] == head.stdout.strip()
    committed = subprocess.run(["git", "show", "HEAD:params.yaml"], cwd=REPO, capture_output=True, check=True).stdout
    (tmp_path / "params.yaml").write_bytes(committed)
    assert stamp["files"]["params.yaml"] == blob_hash(tmp_path / "params.yaml")
    assert json.loads((tmp_path / "tree.json").read_text()) == stamp
