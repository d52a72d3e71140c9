"""The steps of :mod:`flows.stage_table` as Prefect tasks: the one place that makes them so.

The flows (:mod:`flows.pipeline`, :mod:`flows.ct_cycle`, :mod:`flows.delivery`) chain these;
the CLI's stage commands and ``dvc.yaml`` call the plain functions, so a stage command does
not import Prefect (docs/design.md, stages and seams). A step with a cache key in the table
(validation and features: :func:`tasks.caching.data_cache_key`, of the data and the settings
they read) persists its result under it, so an unchanged input is not processed twice; every
other step runs each time. The continuous-training cycle's own lookups (the champion, the
shadow and its record) are tasks here too, though not steps of the table.
"""

from __future__ import annotations

from typing import Any

from prefect import Task, task
from prefect.cache_policies import NO_CACHE

from flows.stage_table import STAGES
from tasks.registry.shadow import current_shadow, record_look, shadow_record
from tasks.registry.versions import current_champion


def stage_task(name: str) -> Task[..., Any]:
    """The table's step ``name`` as a Prefect task of the same name."""
    stage = STAGES[name]
    if stage.cache_key is None:
        return task(stage.function(), name=name, cache_policy=NO_CACHE)
    return task(stage.function(), name=name, persist_result=True, cache_key_fn=stage.cache_key)


ingest_task = stage_task("ingest")
validate_task = stage_task("validate")
features_task = stage_task("features")
train_task = stage_task("train")
backtest_task = stage_task("backtest")
gate_task = stage_task("gate")
register_task = stage_task("register")
deliver_task = stage_task("deliver")
champion_task = task(current_champion, name="champion", cache_policy=NO_CACHE)
shadow_task = task(current_shadow, name="shadow", cache_policy=NO_CACHE)
record_task = task(shadow_record, name="shadow-record", cache_policy=NO_CACHE)
look_task = task(record_look, name="shadow-look", cache_policy=NO_CACHE)
