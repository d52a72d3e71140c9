"""The project's Prefect deployments, served by one runner (``podracer up`` starts it).

Wiring only. Each deployment's parameter is the typed config (``Params``), so the Prefect UI
shows it as an editable form with its field descriptions, and the schema is enforced: a
bad value is refused (HTTP 409) before any run starts (DESIGN §8).

| deployment | runs | started by |
|---|---|---|
| ``rlops-pipeline/manual`` | the whole pipeline | the UI or ``prefect deployment run`` |
| ``ct-cycle/nightly`` | the CT cycle | cron ``schedule.retrain_cron`` in ``schedule.timezone`` |
| ``ct-cycle/on-new-data`` | the CT cycle | the event ``podracer.data.arrived`` (new bars landed) |
| ``deliver/on-promotion`` | one delivery with the new champion | the event ``podracer.model.promoted`` |
| ``trade/session`` | one trading cycle | cron ``schedule.trade_cron`` (market days) |

The runner also polls the registry every ``services.poll_seconds``: a champion that no
delivery has traded with for that long (a lost webhook) is announced again
(:class:`tasks.registry.webhook.Poller`).

    python -m flows.deployments -p params.yaml   # with PREFECT_API_URL set to the server
"""

from __future__ import annotations

import argparse
import logging
import threading
from pathlib import Path

from flows.cli import load_env_defaults

load_env_defaults()

from prefect import serve  # noqa: E402
from prefect.deployments.runner import RunnerDeployment  # noqa: E402
from prefect.events import DeploymentEventTrigger  # noqa: E402
from prefect.schedules import Cron  # noqa: E402

from flows.ct_cycle import CONCURRENCY, ct_cycle  # noqa: E402
from flows.delivery import deliver_champion, trade_session  # noqa: E402
from flows.pipeline import rlops_pipeline  # noqa: E402
from tasks.config import Params, load_params  # noqa: E402
from tasks.data.arrivals import ARRIVED  # noqa: E402
from tasks.delivery.deliver import delivered_version  # noqa: E402
from tasks.registry.gate import champion_version  # noqa: E402
from tasks.registry.webhook import PROMOTED, Poller, prefect_emit  # noqa: E402

log = logging.getLogger("podracer.runner")


def deployments(params: Params) -> list[RunnerDeployment]:
    """Every deployment of the project, its default parameters from ``params``."""
    config = {"params": params.model_dump(mode="json")}
    common = {"enforce_parameter_schema": True, "tags": ["podracer"]}
    tz, schedule = params.schedule.timezone, params.schedule
    return [
        rlops_pipeline.to_deployment(
            name="manual", parameters=config, **common,
            description="The whole pipeline, ingest to delivery, started from the UI or `prefect deployment run`."),
        ct_cycle.to_deployment(
            name="nightly", parameters=config, schedule=Cron(schedule.retrain_cron, timezone=tz),
            concurrency_limit=1, **common,
            description=f"The continuous-training cycle at `{schedule.retrain_cron}` ({tz}): new bars, warm "
                        "retraining, the champion-vs-challenger gate, registration."),
        ct_cycle.to_deployment(
            name="on-new-data", parameters=config, concurrency_limit=1, **common,
            triggers=[DeploymentEventTrigger(
                name="new bars", expect={ARRIVED}, match={"prefect.resource.id": "podracer.dataset.*"},
                parameters={"data_version": "{{ event.payload.data_version }}"})],
            description=f"The continuous-training cycle, started by a `{ARRIVED}` event (ingest of new bars)."),
        deliver_champion.to_deployment(
            name="on-promotion", parameters=config, **common,
            triggers=[DeploymentEventTrigger(
                name="champion moved", expect={PROMOTED},
                match={"prefect.resource.id": f"podracer.model.{params.registry.model_name}"},
                parameters={"version": "{{ event.payload.version }}"})],
            description=f"Delivers the new champion when `{PROMOTED}` fires (MLflow webhook or registry poll)."),
        trade_session.to_deployment(
            name="session", parameters=config, schedule=Cron(schedule.trade_cron, timezone=tz), **common,
            description=f"One trading cycle of the champion at `{schedule.trade_cron}` ({tz})."),
    ]


def ensure_concurrency_limit() -> None:
    """The ``ct-cycle`` global concurrency limit (one slot) that both CT deployments share."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.exceptions import ObjectAlreadyExists

    with get_client(sync_client=True) as client:
        try:
            client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=CONCURRENCY, limit=1))
        except ObjectAlreadyExists:
            pass


def start_poller(params: Params, stop: threading.Event) -> threading.Thread:
    """The registry poll for lost webhooks, in a daemon thread of the runner."""
    poller = Poller(lambda: champion_version(params.registry), lambda: delivered_version(params), prefect_emit,
                    params.registry.model_name, params.services.poll_seconds)
    thread = threading.Thread(target=poller.run, args=(stop,), name="registry-poll", daemon=True)
    thread.start()
    return thread


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-p", "--params", type=Path, default=Path("params.yaml"))
    args = parser.parse_args()
    params = load_params(args.params)
    ensure_concurrency_limit()
    start_poller(params, threading.Event())
    serve(*deployments(params), print_starting_message=True)


if __name__ == "__main__":
    main()
