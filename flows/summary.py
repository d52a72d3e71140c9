"""Rich rendering of a pipeline run: metrics beside buy-and-hold, registry, artifacts, orders.

The results are only read here, so their modules are imported for their types alone: a
command that prints an order table (``podracer trade``) does not import the pipeline's stages.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.table import Table

from tasks.delivery.keys import CHAMPION
from tasks.errors import PodracerError
from trainers.common.metrics import METRICS

if TYPE_CHECKING:
    from flows.pipeline import PipelineSummary
    from tasks.delivery.client.loop import CycleResult
    from tasks.model.backtest import BacktestResult

PERCENT = {"cumulative_return", "annual_return", "annual_volatility", "max_drawdown"}
ANNUAL = {"annual_return", "annual_volatility", "sharpe", "calmar"}
"""The figures scaled to a year (:data:`tasks.model.backtest.YEAR_SESSIONS` sessions)."""


def _fmt(name: str, value: float) -> str:
    return f"{value:.2%}" if name in PERCENT else f"{value:.2f}"


def metrics_table(result: BacktestResult) -> Table:
    """Every arm's metrics side by side (the pipeline's: the agent beside buy-and-hold, and the
    champion when one sits). The title says how long the window is and the first row is its
    total return; on a short window the annualised rows are starred and the caption says
    they extrapolate it to a year."""
    from tasks.model.backtest import YEAR_SESSIONS, extrapolated, span

    short = extrapolated(result)
    table = Table(title=f"Backtest {result.start} to {result.end}, {span(result)} (test window, after costs)",
                  caption=f"* extrapolated from {result.sessions} sessions to a year of {YEAR_SESSIONS}"
                  if short else None)
    table.add_column("metric")
    for arm in result.metrics:
        table.add_column(arm.replace("_", "-"), justify="right")
    for name in METRICS:
        label = "total return (window)" if name == "cumulative_return" else name.replace("_", " ")
        table.add_row(label + (" *" if short and name in ANNUAL else ""),
                      *(_fmt(name, values[name]) for values in result.metrics.values()))
    return table


def orders_table(result: CycleResult) -> Table:
    """One trading cycle: its orders and what became of them, the account after it."""
    title = f"Paper orders for bar {result.bar} from {result.model_uri}"
    caption = f"cash {result.cash:,.2f}  equity {result.equity:,.2f}"
    if result.halted:
        caption += f"  HALTED: {result.halted}"
    elif not result.decided:
        caption += "  held: no decision on this bar (env.decide_every)"
    table = Table(title=title, caption=caption)
    for column in ("side", "symbol", "qty", "filled", "price", "status"):
        table.add_column(column, justify="right" if column in ("qty", "filled", "price") else "left")
    for o in result.orders:
        price = o.get("filled_avg_price")
        table.add_row(o["side"], o["symbol"], str(o["qty"]), str(o.get("filled_qty", 0)),
                      f"{price:.2f}" if price else "-", o["status"])
    for o in result.blocked:
        table.add_row(o["side"], o["symbol"], str(o["qty"]), "0", "-", f"blocked: {o['reason']}")
    if not result.orders and not result.blocked:
        table.add_row("-", "no orders", "", "", "", "")
    return table


def traded(result: CycleResult) -> Group:
    """A delivery cycle: the champion's orders, then the shadow's (its own account), or the
    shadow's alone with the line that no champion traded."""
    shown: list[RenderableType] = []
    for cycle in (result, result.shadow):
        if cycle is not None:
            table = orders_table(cycle)
            if cycle.role != CHAMPION:
                table.title = f"{cycle.role.capitalize()} account: {table.title}"
            shown.append(table)
    if result.role != CHAMPION:
        shown.append(f"[yellow]no champion traded[/] (no version has alias 'champion'): only the {result.role} "
                     "traded, in its own account")
    return Group(*shown)


def render(console: Console, s: PipelineSummary) -> None:
    """Print the end-of-run summary: the test window's metrics (with the champion's beside
    the agent's when the gate faced one), the registry's verdict, the artifacts, the orders."""
    console.print(metrics_table(s.gate.compared or s.backtest))
    reg = s.register
    colour = "green" if reg.promoted else "yellow"
    console.print(f"[bold]model[/] {reg.model_name} version {reg.version} (alias {', '.join(reg.aliases)})")
    console.print(f"[bold]gate[/] [{colour}]{escape(reg.reason)}[/]")
    console.print(f"[bold]MLflow run[/] {reg.run_id}   [bold]data version[/] {s.ingest.data_version}"
                  f"{' (reused)' if s.ingest.reused else ''}")
    console.print(f"[bold]training[/] {s.train.describe()}")
    console.print(f"[bold]artifacts[/] plot {s.backtest.plot}, metrics {s.backtest.metrics_file}, "
                  f"validation report {s.validate.report}, model bundle {s.train.model_dir}, "
                  f"run artifacts {reg.artifact_uri}")
    if s.deliver is not None:
        console.print(traded(s.deliver))
    else:
        console.print(f"[yellow]deliver:[/] {s.note}")


class _DropExpected(logging.Filter):
    """Drops log records whose traceback is a PodracerError: the CLI prints its one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], PodracerError))


def silence_expected_tracebacks() -> None:
    """Keep Prefect's console from printing tracebacks for expected, one-line errors."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, _DropExpected) for f in handler.filters):
            handler.addFilter(_DropExpected())
