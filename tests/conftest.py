"""Shared fixtures: a tiny config per test (standins/tiny.py) and a session-wide tiny pipeline run
(plain functions)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tasks.settings import load_env_defaults

# One thread a process for torch's (and numpy's) kernels and for Inductor's compiles, in every
# process the suite starts: its xdist workers already keep both cores busy, so a second
# OpenMP thread and Inductor's pool of compile workers only took CPU from the other tests
# (docs/testing.md, Where the time goes). Set before torch loads; a value already set wins.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
load_env_defaults()
# CI runs the same hypothesis examples every time; explore more locally with
# HYPOTHESIS_PROFILE=explore.
settings.register_profile("ci", derandomize=True, database=None, max_examples=120)
settings.register_profile("explore", max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

from standins.tiny import tiny_params  # noqa: E402
from tasks.config import Params  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
"""The repository root: subprocesses that run the CLI or the SDK start here."""


LONGEST = ("tests/flows/test_services.py", "tests/flows/test_cli_commands.py")
"""The two longest tests (4 to 6 minutes each): they start first, on different workers."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests that need the session's tiny pipeline (``make mutate`` leaves them out),
    and order the collection as `make test` should start it: the two longest tests, then the
    other slow end-to-end tests, then the rest, in file order. ``--dist load --maxschedchunk 1``
    hands each worker two tests to start with, then the next whenever it has fewer than two
    waiting: the two longest, every other place at the front, start on different workers, the
    other long ones spread over both, and the short ones fill in behind (docs/testing.md,
    Where the time goes)."""
    for item in items:
        if {"built", "built_copy"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.pipeline)

    slow = [item for item in items if item.get_closest_marker("slow")]
    longest = sorted((item for item in slow if item.nodeid.startswith(LONGEST)),
                     key=lambda item: LONGEST.index(item.nodeid.split("::")[0]))
    others = [item for item in slow if item not in longest]
    ordered: list[pytest.Item] = []
    for item in longest:  # a worker starts with two tests: one long one each
        ordered += [item, *others[:1]]
        others = others[1:]
    items[:] = ordered + others + [item for item in items if not item.get_closest_marker("slow")]


@pytest.fixture(scope="session", autouse=True)
def migrated_once(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A new sqlite MLflow store gets its tables by copying a store migrated once per worker,
    not by running MLflow's migrations again (about a second a store; docs/testing.md). The
    copy is the whole database, so the store is the one migrations would have made; other
    databases, and the CLI's own processes, migrate as they always do."""
    import sqlite3

    from mlflow.store.db import utils
    from mlflow.store.model_registry import sqlalchemy_store as registry_store

    migrate = utils._initialize_tables
    template = tmp_path_factory.getbasetemp() / "mlflow-migrated.db"

    def initialize(engine) -> None:
        if engine.dialect.name != "sqlite":
            return migrate(engine)
        if not template.exists():
            built = template.with_suffix(".building")
            fresh = utils.create_sqlalchemy_engine_with_retry(f"sqlite:///{built}")
            migrate(fresh)
            fresh.dispose()
            built.rename(template)
        target = engine.raw_connection()
        try:
            with sqlite3.connect(template) as source:
                source.backup(target.driver_connection)
        finally:
            target.close()

    utils._initialize_tables = registry_store._initialize_tables = initialize
    yield
    utils._initialize_tables = registry_store._initialize_tables = migrate


@pytest.fixture(scope="session")
def prefect_server() -> Iterator[None]:
    """One temporary Prefect server for every test that runs flows or Prefect tasks (docs/testing.md)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        yield


@pytest.fixture
def tiny(tmp_path: Path) -> Params:
    return tiny_params(tmp_path)


def build_through_backtest(params: Params) -> Params:
    """Run ingest → validate → features → train → backtest on ``params``."""
    from tasks.data.features import features
    from tasks.data.ingest import ingest
    from tasks.data.validate import validate
    from tasks.model.backtest import backtest
    from tasks.model.train import train

    for stage in (ingest, validate, features, train, backtest):
        stage(params)
    return params


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, params_of: Callable[[Path], Params]) -> Params:
    """``build_through_backtest(params_of(folder))`` once for the whole run, in a folder that
    every pytest-xdist worker sees: the first worker to need it builds it, under a file lock,
    and the others read it (the build is deterministic, and the tests only read it)."""
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp()
    shared = shared.parent if os.environ.get("PYTEST_XDIST_WORKER") else shared
    folder = shared / name
    with FileLock(f"{folder}.lock"):
        if not (folder / ".built").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build_through_backtest(params_of(folder))
            (folder / ".built").touch()
    return params_of(folder)


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Params:
    """Ingest → validate → features → train → backtest once, at tiny size (read-only for tests)."""
    return built_once(tmp_path_factory, "built", tiny_params)


@pytest.fixture
def built_copy(built: Params, tmp_path: Path) -> Params:
    """A private copy of the built tiny pipeline, for tests that write."""
    shutil.copytree(built.data_dir, tmp_path / "data")
    return tiny_params(tmp_path)
