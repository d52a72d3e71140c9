"""The stage functions of ``tasks/`` as Prefect tasks: the one place that makes them so.

The flows (:mod:`flows.pipeline`, :mod:`flows.ct_cycle`, :mod:`flows.delivery`) chain these;
the CLI's stage commands and ``dvc.yaml`` call the plain functions, so a stage command does
not import Prefect (docs/design.md, stages and seams). Validation and features persist their
results under a key of the data and the settings they read (:func:`tasks.caching.data_cache_key`),
so an unchanged input is not processed twice; every other stage runs each time.
"""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.caching import data_cache_key
from tasks.data.features import features
from tasks.data.ingest import ingest
from tasks.data.validate import validate
from tasks.delivery.client.deliver import deliver
from tasks.model.backtest import backtest
from tasks.model.train import train
from tasks.registry.gate import gate_report
from tasks.registry.register import register
from tasks.registry.shadow import current_shadow, record_look, shadow_record
from tasks.registry.versions import current_champion

ingest_task = task(ingest, name="ingest", cache_policy=NO_CACHE)
validate_task = task(
    validate, name="validate", persist_result=True,
    # features: the report's coverage depends on features.min_history
    cache_key_fn=data_cache_key(("validation", "features"), lambda p: [p.dirs.validated, p.dirs.quarantine]),
)
features_task = task(
    features, name="features", persist_result=True,
    cache_key_fn=data_cache_key(("validation", "features"), lambda p: [p.dirs.validated, p.dirs.features]),
)
train_task = task(train, name="train", cache_policy=NO_CACHE)
backtest_task = task(backtest, name="backtest", cache_policy=NO_CACHE)
champion_task = task(current_champion, name="champion", cache_policy=NO_CACHE)
gate_task = task(gate_report, name="gate", cache_policy=NO_CACHE)
register_task = task(register, name="register", cache_policy=NO_CACHE)
shadow_task = task(current_shadow, name="shadow", cache_policy=NO_CACHE)
record_task = task(shadow_record, name="shadow-record", cache_policy=NO_CACHE)
look_task = task(record_look, name="shadow-look", cache_policy=NO_CACHE)
deliver_task = task(deliver, name="deliver", cache_policy=NO_CACHE)
