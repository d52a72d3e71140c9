"""The tiny config: params.yaml's shape at the smallest sizes that still run every stage
(4 symbols, two years of daily bars, a population of 2 for 2 generations), so a whole
pipeline runs in seconds (docs/testing.md, the tiny pipeline).

The test suite builds on it, and so do the benchmarks' ``--tiny`` runs and the trading-loop
benchmark's throwaway pipeline (docs/benchmarks.md). :data:`TINY` is a list of ``KEY=VALUE``
overrides rather than a YAML file because it is applied two ways: on the built-in defaults by
:func:`tiny_params`, and on params.yaml through the CLI's ``-s`` options.
"""

from __future__ import annotations

from pathlib import Path

from tasks.config import Params, load_params

TINY = [
    "data.symbols=4", "data.start=2020-01-01", "data.end=2021-12-31", "data.signal=1.0",
    "features.train_end=2021-03-31", "features.val_end=2021-08-31",
    "env.episode_len=32", "env.min_episode_len=8",
    "ppo.num_envs=4", "ppo.horizon=16", "ppo.batch_size=32", "ppo.repeat_times=2", "ppo.net_dims=[16]",
    "evolution.population=2", "evolution.generations=2", "evolution.iterations_per_generation=1",
    "evolution.search_space={lr: [0.0001, 0.001], net_width: [12, 20]}",
    "trade.fill_timeout_seconds=1", "registry.tearsheet=false",
]
"""``trade.fill_timeout_seconds=1``: the tiny market's last bar is years behind the wall clock, so
an order sent while the wall clock's market is open waits for a bar that never comes (``new``),
and a cycle would poll the whole default 10 s for it; outside those hours its orders are
``accepted`` for the next open and no cycle waits (docs/delivery.md).

``registry.tearsheet=false``: quantstats drew a tiny CT cycle's tearsheet in 4.0 of its 10.9
seconds (profiled alone), its largest part, and the suite runs a few dozen cycles; one CT-cycle
test draws it (tests/flows/test_ct_cycle.py), and tests/tasks/registry/test_report.py tests
the page."""


def tiny_params(root: Path, *overrides: str) -> Params:
    """Tiny-size config on the built-in defaults (no params.yaml), whose data and MLflow store
    live under ``root``; ``overrides`` apply last."""
    return load_params(
        Path("/nonexistent/params.yaml"),
        [*TINY, f"data_dir={root / 'data'}", f"registry.tracking_uri=sqlite:///{root / 'mlflow' / 'mlflow.db'}",
         f"registry.artifact_root={root / 'mlflow' / 'artifacts'}", *overrides],
    )
