"""Shared fixtures: a tiny config per test (standins/tiny.py) and a session-wide tiny pipeline run
(plain functions)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tasks.settings import load_env_defaults

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
"""The two longest tests (about 5 and 3.5 minutes): they start first, one on each worker."""


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


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> Params:
    """Ingest → validate → features → train → backtest once, at tiny size (read-only for tests)."""
    return build_through_backtest(tiny_params(tmp_path_factory.mktemp("built")))


@pytest.fixture
def built_copy(built: Params, tmp_path: Path) -> Params:
    """A private copy of the built tiny pipeline, for tests that write."""
    shutil.copytree(built.data_dir, tmp_path / "data")
    return tiny_params(tmp_path)
