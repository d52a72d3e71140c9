"""The Prefect flow ``rlops_pipeline``: the eight steps of :mod:`flows.stage_table`, chained
(docs/design.md, stages and seams).

Wiring only; every step is a plain function in ``tasks/``, made a Prefect task in
:mod:`flows.stages`, the same tasks the continuous-training
cycle (:mod:`flows.ct_cycle`) lists, run on the date splits: train on the train split,
select on validation, backtest on test, gate against buy-and-hold and the sitting champion
(backtested beside the agent on the test window; docs/operations.md, the gate), then
deliver. The flow parameter is the typed config, so the Prefect UI shows it as an editable
form.
"""

from __future__ import annotations

from dataclasses import dataclass

from prefect import flow
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from flows.stages import (
    backtest_task,
    champion_task,
    deliver_task,
    features_task,
    gate_task,
    ingest_task,
    register_task,
    train_task,
    validate_task,
)
from flows.terminal import training_bar
from tasks.config import Params, load_params
from tasks.data.features import FeaturesResult
from tasks.data.ingest import IngestResult
from tasks.data.validate import ValidateResult
from tasks.delivery.client.loop import CycleResult
from tasks.model.backtest import BacktestResult
from tasks.model.train import TrainResult
from tasks.registry.aliases import SHADOW, alias_version, champion_version
from tasks.registry.gate import GateVerdict
from tasks.registry.register import RegisterResult, pipeline_candidate
from trainers.common.metrics import METRICS


@dataclass(frozen=True)
class PipelineSummary:
    """Each step's result, one field per step of :data:`flows.stage_table.STAGES` in its order,
    and why nothing was delivered, when nothing was."""

    ingest: IngestResult
    validate: ValidateResult
    features: FeaturesResult
    train: TrainResult
    backtest: BacktestResult
    gate: GateVerdict
    register: RegisterResult
    deliver: CycleResult | None
    note: str


@flow(name="rlops-pipeline")
def rlops_pipeline(params: Params | None = None) -> PipelineSummary:
    """Ingest → validate → features → train → backtest → gate → register → deliver.

    ``params`` defaults to ``params.yaml`` in the working directory. Validate and features
    are cached on the data version (``tasks/caching.py``). The gate faces the sitting
    champion, if any, beside buy-and-hold. The validation report, the backtest metrics and
    the gate report are Prefect artifacts. Delivery runs only when some version holds the
    ``champion`` or the ``shadow`` alias (each trades its own paper account).
    """
    params = params or load_params()
    ingested = ingest_task(params)
    validated = validate_task(params)
    create_markdown_artifact(markdown=validated.report.read_text(), key="validation-report",
                             description=f"Validation of data version {ingested.data_version}")
    featured = features_task(params)
    trained = train_task(params, ingested.data_version, display=training_bar)
    tested = backtest_task(params)
    create_table_artifact(
        table=[{"metric": m, **{arm: values[m] for arm, values in tested.metrics.items()}} for m in METRICS],
        key="backtest-metrics", description=f"Test window {tested.start} to {tested.end}, after costs",
    )
    verdict = gate_task(params, tested, champion=champion_task(params))
    create_markdown_artifact(markdown=verdict.report_markdown, key="gate-report",
                             description=f"The gate on the test window {tested.start} to {tested.end}")
    registered = register_task(params, pipeline_candidate(params, tested, verdict))
    if champion_version(params.registry) is None and alias_version(params.registry, SHADOW) is None:
        return PipelineSummary(ingested, validated, featured, trained, tested, verdict, registered, None,
                               "no champion or shadow yet: nothing delivered")
    delivered = deliver_task(params)
    return PipelineSummary(ingested, validated, featured, trained, tested, verdict, registered, delivered, "")
