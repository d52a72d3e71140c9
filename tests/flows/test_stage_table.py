"""The stage table (flows/stage_table.py): every step runs a plain function of ``tasks/``, says
what it does today, and the flows' tasks are made from it."""

import inspect
from typing import get_args

from flows.stage_table import COMMANDS, STAGES
from tasks.config_data import SourceName
from trainers.algorithms import ALGORITHMS


def test_the_steps_run_in_the_flows_order_and_seven_have_a_command():
    assert list(STAGES) == ["ingest", "validate", "features", "train", "backtest", "gate", "register", "deliver"]
    assert [s.name for s in COMMANDS] == [name for name in STAGES if name != "gate"]
    assert [s.name for s in STAGES.values() if s.command and s.repro] == list(STAGES)[:5] + ["register"]


def test_every_step_runs_a_function_of_tasks_that_takes_the_params_first():
    for stage in STAGES.values():
        fn = stage.function()
        assert fn.__module__ == stage.runs.split(":")[0] and fn.__module__.startswith("tasks."), stage.name
        assert next(iter(inspect.signature(fn).parameters)) == "params", stage.name


def test_the_help_names_every_source_and_every_learner():
    assert all(source in STAGES["ingest"].help for source in get_args(SourceName))
    assert all(name.upper() in STAGES["train"].help for name in ALGORITHMS)
    assert "PPO population" not in STAGES["train"].help


def test_only_validation_and_features_are_cached():
    assert [s.name for s in STAGES.values() if s.cache_key is not None] == ["validate", "features"]


def test_the_flows_tasks_are_the_tables_steps():
    from flows import stages

    for stage in STAGES.values():
        made = getattr(stages, f"{stage.name}_task")
        assert made.name == stage.name and made.fn is stage.function()
        assert made.cache_key_fn is stage.cache_key or stage.cache_key is None
