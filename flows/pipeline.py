"""The Prefect flow ``rlops_pipeline``: the seven stages of DESIGN §1, chained.

Wiring only; every stage is a task in ``tasks/``. The flow parameter is the typed config,
so the Prefect UI shows it as an editable form.
"""

from __future__ import annotations

from dataclasses import dataclass

from prefect import flow
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from tasks.config import Params, load_params
from tasks.data.features import FeaturesResult, features_task
from tasks.data.ingest import IngestResult, ingest_task
from tasks.data.validate import ValidateResult, validate_task
from tasks.delivery.deliver import deliver_task
from tasks.delivery.loop import CycleResult
from tasks.model.backtest import BacktestResult, backtest_task
from tasks.model.train import TrainResult, train_task
from tasks.registry.gate import champion_version
from tasks.registry.register import RegisterResult, register_task
from trainers.metrics import METRICS


@dataclass(frozen=True)
class PipelineSummary:
    ingest: IngestResult
    validate: ValidateResult
    features: FeaturesResult
    train: TrainResult
    backtest: BacktestResult
    register: RegisterResult
    deliver: CycleResult | None
    note: str


@flow(name="rlops-pipeline")
def rlops_pipeline(params: Params | None = None) -> PipelineSummary:
    """Ingest → validate → features → train → backtest → register → deliver.

    ``params`` defaults to ``params.yaml`` in the working directory. Validate and features
    are cached on the data version (``tasks/caching.py``). The validation report and the
    backtest metrics are Prefect artifacts. Delivery runs only when some version holds the
    ``champion`` alias.
    """
    params = params or load_params()
    ingested = ingest_task(params)
    validated = validate_task(params)
    create_markdown_artifact(markdown=validated.report.read_text(), key="validation-report",
                             description=f"Validation of data version {ingested.data_version}")
    featured = features_task(params)
    trained = train_task(params, ingested.data_version)
    tested = backtest_task(params)
    create_table_artifact(
        table=[{"metric": m, "agent": tested.metrics[m], "buy_and_hold": tested.buy_and_hold[m]} for m in METRICS],
        key="backtest-metrics", description=f"Test window {tested.start} to {tested.end}, after costs",
    )
    registered = register_task(params)
    if champion_version(params.registry) is None:
        return PipelineSummary(ingested, validated, featured, trained, tested, registered, None,
                               "no champion yet: nothing delivered")
    delivered = deliver_task(params)
    return PipelineSummary(ingested, validated, featured, trained, tested, registered, delivered, "")
