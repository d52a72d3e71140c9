"""The project's Prefect deployments, served by one runner (``podracer up`` starts it).

Wiring only. Each deployment's parameter is the typed config (``Params``), so the Prefect UI
shows it as an editable form with its field descriptions, and the schema is enforced: a
bad value is refused (HTTP 409) before any run starts (DESIGN §8).

| deployment | runs | started by |
|---|---|---|
| ``rlops_pipeline/manual`` | the whole pipeline | the UI or ``prefect deployment run`` |

    python -m flows.deployments -p params.yaml   # with PREFECT_API_URL set to the server
"""

from __future__ import annotations

import argparse
from pathlib import Path

from flows.cli import load_env_defaults

load_env_defaults()

from prefect import serve  # noqa: E402
from prefect.deployments.runner import RunnerDeployment  # noqa: E402

from flows.pipeline import rlops_pipeline  # noqa: E402
from tasks.config import Params, load_params  # noqa: E402


def deployments(params: Params) -> list[RunnerDeployment]:
    """Every deployment of the project, its default parameters from ``params``."""
    return [
        rlops_pipeline.to_deployment(
            name="manual", parameters={"params": params.model_dump(mode="json")}, enforce_parameter_schema=True,
            description="The whole pipeline, ingest to delivery, started from the UI or `prefect deployment run`.",
            tags=["podracer"]),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-p", "--params", type=Path, default=Path("params.yaml"))
    args = parser.parse_args()
    serve(*deployments(load_params(args.params)), print_starting_message=True)


if __name__ == "__main__":
    main()
