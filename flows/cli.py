"""The ``podracer`` command line: the whole pipeline or any one stage.

``podracer run`` runs the Prefect flow on Prefect's temporary local server; the stage
commands call the same task functions directly (this is what ``dvc.yaml`` runs). A bad
config or bad data ends in one red line and exit code 1, never a traceback.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

ROOT = Path(__file__).resolve().parents[1]


def load_env_defaults(path: Path = ROOT / ".env") -> None:
    """Apply the repo's quiet/offline settings (``.env``) without overriding the shell."""
    if path.exists():
        for line in path.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep and not key.lstrip().startswith("#"):
                os.environ.setdefault(key.strip(), value.strip())


load_env_defaults()

from tasks.config import Params, load_params  # noqa: E402  (after the env defaults)
from tasks.errors import PodracerError  # noqa: E402

console = Console()
app = typer.Typer(
    help="Podracer RLOps: market data to a paper-trading champion, with generational-evolution PPO.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
ParamsPath = Annotated[Path, typer.Option("--params", "-p", help="Config file.")]
Overrides = Annotated[list[str], typer.Option("--set", "-s", help="Override a key, e.g. -s evolution.generations=2")]
T = TypeVar("T")


def _params(path: Path, overrides: list[str] | None) -> Params:
    return load_params(path, overrides or [])


def _stage(name: str, fn: Callable[[], T]) -> T:
    """Run one stage; a PodracerError becomes one red line and exit code 1."""
    try:
        return fn()
    except PodracerError as exc:
        console.print(f"[bold red]✗ {name}:[/] {escape(str(exc))}", soft_wrap=True, highlight=False)
        raise typer.Exit(1) from None


def _log_to_console() -> None:
    """Show the stages' INFO logs; Prefect's console handler prints them once it is set up."""
    logging.getLogger("podracer").setLevel(logging.INFO)
    if not logging.getLogger().handlers:
        from rich.logging import RichHandler

        logging.getLogger().addHandler(RichHandler(console=console, show_path=False, show_time=False))


@app.command()
def run(params: ParamsPath = Path("params.yaml"), set_: Overrides = []) -> None:  # noqa: B006
    """Run the whole pipeline as the Prefect flow rlops_pipeline."""
    from flows.pipeline import rlops_pipeline
    from flows.summary import render, silence_expected_tracebacks

    cfg = _stage("config", lambda: _params(params, set_))
    _log_to_console()
    silence_expected_tracebacks()
    summary = _stage("pipeline", lambda: rlops_pipeline(cfg))
    render(console, summary)


@app.command()
def ingest(params: ParamsPath = Path("params.yaml"), set_: Overrides = []) -> None:  # noqa: B006
    """Stage 1: bars from the configured source into data/raw/."""
    from tasks.ingest import ingest as stage

    _log_to_console()
    result = _stage("ingest", lambda: stage(_params(params, set_)))
    console.print(f"[green]✓ ingest[/] {result.rows} rows, {result.symbols} symbols, "
                  f"data version {result.data_version}{' (reused)' if result.reused else ''}")


@app.command()
def validate(params: ParamsPath = Path("params.yaml"), set_: Overrides = []) -> None:  # noqa: B006
    """Stage 2: Great Expectations suite; bad rows to data/quarantine/."""
    from tasks.validate import validate as stage

    _log_to_console()
    result = _stage("validate", lambda: stage(_params(params, set_)))
    console.print(f"[green]✓ validate[/] {result.rows_out} of {result.rows_in} rows passed, "
                  f"{result.quarantined} quarantined; report {result.report}")


@app.command()
def features(params: ParamsPath = Path("params.yaml"), set_: Overrides = []) -> None:  # noqa: B006
    """Stage 3: indicators, date splits and train-only normalisation."""
    from tasks.features import features as stage

    _log_to_console()
    result = _stage("features", lambda: stage(_params(params, set_)))
    splits = ", ".join(f"{k} {a}..{b}" for k, (a, b) in result.splits.items())
    console.print(f"[green]✓ features[/] {result.bars} bars x {result.symbols} symbols x "
                  f"{len(result.feature_names)} indicators; {splits}")


@app.command()
def train(params: ParamsPath = Path("params.yaml"), set_: Overrides = []) -> None:  # noqa: B006
    """Stage 4: generational evolution of the PPO population."""
    from tasks.train import train as stage

    _log_to_console()
    result = _stage("train", lambda: stage(_params(params, set_)))
    console.print(f"[green]✓ train[/] best validation Sharpe {result.best_fitness:.3f} "
                  f"(agent {result.best_agent}, generation {result.best_generation}), "
                  f"{result.env_steps} env steps in {result.seconds:.0f}s on {result.device}")


@app.command()
def backtest(params: ParamsPath = Path("params.yaml"), set_: Overrides = []) -> None:  # noqa: B006
    """Stage 5: the trained policy on the test window, beside buy-and-hold."""
    from flows.summary import metrics_table
    from tasks.backtest import backtest as stage

    _log_to_console()
    result = _stage("backtest", lambda: stage(_params(params, set_)))
    console.print(metrics_table(result))
    console.print(f"[green]✓ backtest[/] plot {result.plot}")


@app.command()
def register(params: ParamsPath = Path("params.yaml"), set_: Overrides = []) -> None:  # noqa: B006
    """Stage 6: MLflow run, registered model, champion gate."""
    from tasks.register import register as stage

    _log_to_console()
    result = _stage("register", lambda: stage(_params(params, set_)))
    console.print(f"[green]✓ register[/] {result.model_name} version {result.version} "
                  f"alias {', '.join(result.aliases)} ({result.reason}); run {result.run_id}")


@app.command()
def deliver(params: ParamsPath = Path("params.yaml"), set_: Overrides = []) -> None:  # noqa: B006
    """Stage 7: the champion trades the latest bar on the local paper broker."""
    from flows.summary import orders_table
    from tasks.deliver import deliver as stage

    _log_to_console()
    result = _stage("deliver", lambda: stage(_params(params, set_)))
    console.print(orders_table(result))


@app.command()
def promote(
    version: Annotated[str, typer.Argument(help="Model version to make champion.")],
    params: ParamsPath = Path("params.yaml"),
) -> None:
    """Make a model version the champion by hand (the old one becomes previous_champion)."""
    from tasks.register import promote as stage

    cfg = _stage("config", lambda: _params(params, []))
    previous = _stage("promote", lambda: stage(cfg.registry, version))
    console.print(f"[green]✓ promote[/] {cfg.registry.model_name} version {version} is champion"
                  + (f"; version {previous} is previous_champion" if previous else ""))


def main() -> None:
    app()


if __name__ == "__main__":
    main()
