"""The ``podracer`` command line: the whole pipeline or any one stage.

``podracer run`` runs the Prefect flow on Prefect's temporary local server; the stage
commands, one per stage of :mod:`flows.stage_table` with its help and summary line, call the
same task functions directly (this is what ``dvc.yaml`` runs). A bad
config or bad data ends in one red line and exit code 1, never a traceback.

Importing this module reads no settings and imports no Prefect: :func:`settings` loads
``.env`` first thing in every command (``tasks/settings.py``), and each command imports
what it runs.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from rich.markup import escape
from rich.table import Table

from flows.stage_table import COMMANDS, Stage
from flows.terminal import CONSOLE, share_console, training_bar
from tasks.config import Params, load_params
from tasks.errors import PodracerError
from tasks.settings import load_env_defaults

console = CONSOLE
"""rich's global console: the CLI's lines, every log line and the progress bars share it (flows/terminal.py)."""
app = typer.Typer(
    help="Podracer RLOps: market data to a paper-trading champion, trained as an evolving population "
         "of reinforcement learners.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
ParamsPath = Annotated[Path, typer.Option("--params", "-p", help="Config file.")]
Overrides = Annotated[list[str], typer.Option("--set", "-s", help="Override a key, e.g. -s evolution.generations=2")]
Profile = Annotated[bool, typer.Option("--profile", help="Profile training: a time breakdown table and "
                                       "data/models/profile.png (sets train.profile).")]
Resume = Annotated[bool, typer.Option("--resume", help="Continue a killed training run from its last finished "
                                     "generation (sets train.resume).")]
T = TypeVar("T")


@app.callback()
def settings() -> None:
    """Load the quiet and offline settings of ``.env`` before a command imports Prefect."""
    load_env_defaults()


def _params(path: Path, overrides: list[str] | None, profile: bool = False, resume: bool = False,
            clients: bool = True) -> Params:
    """The config; while `podracer up`'s services run, this process's clients use them
    (``clients``; not for ``up``, ``down`` and ``status``, which manage them)."""
    flags = [f"train.{name}=true" for name, on in (("profile", profile), ("resume", resume)) if on]
    cfg = load_params(path, [*(overrides or []), *flags])
    share_console()
    if clients and (cfg.data_dir / "services" / "services.json").exists():
        from deploy.local.services import use_servers

        cfg = use_servers(cfg)
    return cfg


def _stage(name: str, fn: Callable[[], T]) -> T:
    """Run one stage; a PodracerError becomes one red line and exit code 1."""
    try:
        return fn()
    except PodracerError as exc:
        console.print(f"[bold red]✗ {name}:[/] {escape(str(exc))}", soft_wrap=True, highlight=False)
        raise typer.Exit(1) from None


def _log_to_console() -> None:
    """Show the stages' INFO logs, through the console the progress bars draw on: Prefect's
    console handler, once it is set up, is rebound to it (``flows/terminal.py``)."""
    logging.getLogger("podracer").setLevel(logging.INFO)
    if not logging.getLogger().handlers:
        from rich.logging import RichHandler

        logging.getLogger().addHandler(RichHandler(console=console, show_path=False, show_time=False))
    share_console()


@app.command()
def run(params: ParamsPath = Path("params.yaml"), set_: Overrides = [], profile: Profile = False) -> None:  # noqa: B006
    """Run the whole pipeline as the Prefect flow rlops_pipeline."""
    from flows.pipeline import rlops_pipeline
    from flows.summary import render, silence_expected_tracebacks

    cfg = _stage("config", lambda: _params(params, set_, profile))
    _log_to_console()
    silence_expected_tracebacks()
    summary = _stage("pipeline", lambda: rlops_pipeline(cfg))
    render(console, summary)


def _add_stage_command(stage: Stage) -> None:
    """``podracer <stage>``: its help and what it prints come from the stage table."""
    summary = stage.summary
    assert summary is not None, f"{stage.name} has no command"

    def run_stage(params: Path, set_: list[str], profile: bool = False, resume: bool = False) -> None:
        display = {"display": training_bar} if stage.trains else {}

        def call() -> object:
            cfg = _params(params, set_, profile, resume)
            return stage.function()(cfg, **display)

        _log_to_console()
        console.print(summary(_stage(stage.name, call)))

    def command(params: ParamsPath = Path("params.yaml"), set_: Overrides = []) -> None:  # noqa: B006
        run_stage(params, set_)

    def train_command(params: ParamsPath = Path("params.yaml"), set_: Overrides = [],  # noqa: B006
                      profile: Profile = False, resume: Resume = False) -> None:
        run_stage(params, set_, profile, resume)

    chosen = train_command if stage.trains else command
    chosen.__doc__ = stage.help
    app.command(name=stage.name)(chosen)


for _stage_row in COMMANDS:  # each stage's module is imported when its command runs
    _add_stage_command(_stage_row)


@app.command()
def promote(
    version: Annotated[str, typer.Argument(help="Model version to make champion.")],
    params: ParamsPath = Path("params.yaml"),
) -> None:
    """Make a model version the champion by hand (the old one becomes previous_champion)."""
    from tasks.registry.aliases import promote as stage

    cfg = _stage("config", lambda: _params(params, []))
    previous = _stage("promote", lambda: stage(cfg.registry, version))
    console.print(f"[green]✓ promote[/] {cfg.registry.model_name} version {version} is champion"
                  + (f"; version {previous} is previous_champion" if previous else ""))


@app.command()
def rollback(params: ParamsPath = Path("params.yaml")) -> None:
    """Move the champion alias back to previous_champion (delivery follows when the services run)."""
    from tasks.registry.aliases import rollback as stage

    cfg = _stage("config", lambda: _params(params, []))
    restored, replaced = _stage("rollback", lambda: stage(cfg.registry))
    console.print(f"[green]✓ rollback[/] {cfg.registry.model_name} version {restored} is champion again; "
                  f"version {replaced} is previous_champion")


@app.command()
def ct(params: ParamsPath = Path("params.yaml"), set_: Overrides = []) -> None:  # noqa: B006
    """One continuous-training cycle: new bars, warm retraining, challenger vs champion on the newest window."""
    from flows.ct_cycle import ct_cycle
    from flows.summary import silence_expected_tracebacks

    cfg = _stage("config", lambda: _params(params, set_))
    _log_to_console()
    silence_expected_tracebacks()
    summary = _stage("ct", lambda: ct_cycle(cfg))
    done = summary.registered
    console.print(f"[green]✓ ct[/] {escape(summary.note)}" + (f"; {summary.appended_bars} new bar(s), run "
                                                               f"{done.run_id}" if done else ""))
    if done:
        console.print(f"  challenger: {escape(summary.training)}")


@app.command()
def simulate(
    bars: Annotated[int, typer.Option("--bars", help="New bars a symbol after the last ingested one: sessions "
                                      "at data.freq 1d, minutes at 1min.")] = 5,
    turn: Annotated[bool, typer.Option("--turn", help="Plant a regime change: every stock's trend turns over in "
                                       "the new bars, so a momentum champion loses (docs/operations.md, the watch).")]
    = False,
    params: ParamsPath = Path("params.yaml"),
    set_: Overrides = [],  # noqa: B006
) -> None:
    """Extend the embedded market by N bars (deterministic) as a new-data arrival, and announce it."""
    from tasks.data.arrivals import ARRIVED, emit_arrival
    from tasks.data.arrivals import simulate as stage

    cfg = _stage("config", lambda: _params(params, set_))
    arrival = _stage("simulate", lambda: stage(cfg, bars, turn))
    emitted = emit_arrival(cfg, arrival)
    added = (f"{arrival.sessions} session(s) {arrival.first}..{arrival.last}" if cfg.data.freq == "1d" else
             f"{bars} minute(s) {arrival.first}..{arrival.last} ({arrival.sessions} session(s))")
    console.print(f"[green]✓ simulate[/] {added}{', trends turned over' if turn else ''}, "
                  f"{arrival.bars} bars appended to {cfg.dirs.raw}; data version {arrival.data_version} "
                  f"(was {arrival.previous_version}); "
                  + (f"event {ARRIVED} emitted" if emitted else "no Prefect server: no event (`podracer up` first)"))


@app.command()
def receiver(params: ParamsPath = Path("params.yaml"), set_: Overrides = []) -> None:  # noqa: B006
    """Serve the MLflow webhook receiver: signed alias moves become Prefect events (podracer up starts it)."""
    import uvicorn

    from deploy.local.services import HOST, WEBHOOK_SECRET_ENV, webhook_secret
    from tasks.registry.webhook import prefect_emit, receiver_app

    cfg = _stage("config", lambda: _params(params, set_))
    _log_to_console()
    secret = os.environ.get(WEBHOOK_SECRET_ENV) or webhook_secret(cfg)
    app_ = receiver_app(secret, cfg.registry.model_name, prefect_emit)
    uvicorn.run(app_, host=HOST, port=cfg.services.receiver_port, log_config=None, access_log=False)


class Clock(str, Enum):
    wall = "wall"
    simulated = "simulated"


@app.command()
def broker(
    params: ParamsPath = Path("params.yaml"),
    set_: Overrides = [],  # noqa: B006
    port: Annotated[int | None, typer.Option(help="Port on 127.0.0.1 (default broker.port; 0: any free one).")] = None,
    clock: Annotated[Clock | None, typer.Option(help="The market clock (default broker.clock).")] = None,
) -> None:
    """Serve the local paper broker: Alpaca's Trading API on 127.0.0.1, over data/broker/broker.db."""
    from tasks.delivery.broker.service import serve

    cfg = _stage("config", lambda: _params(params, set_))
    _log_to_console()
    _stage("broker", lambda: serve(cfg, port, clock.value if clock else None))


@app.command()
def trade(
    params: ParamsPath = Path("params.yaml"),
    set_: Overrides = [],  # noqa: B006
    replay: Annotated[str | None, typer.Option(help="Replay START..END (or 'test') on a fresh simulated "
                                               "account and compare with the backtest.")] = None,
    once: Annotated[bool, typer.Option("--once", help="One cycle on the latest bar, then stop.")] = False,
    halt: Annotated[bool, typer.Option("--halt", help="Kill switch: cancel open orders, stop all trading.")] = False,
    unhalt: Annotated[bool, typer.Option("--unhalt", help="Clear the kill switch.")] = False,
) -> None:
    """The trading loop: the champion (and the shadow, in its own account) trades each new bar on trade.broker."""
    from flows.summary import traded
    from tasks.delivery.client import live
    from tasks.delivery.client import replay as replays
    from tasks.delivery.client.deliver import deliver

    cfg = _stage("config", lambda: _params(params, set_))
    _log_to_console()
    if halt or unhalt:
        console.print(_stage("trade", lambda: live.switch(cfg, halt)))
    elif replay is not None:
        result = _stage("trade", lambda: replays.replay(cfg, replay))
        console.print(f"[green]✓ replay[/] {result.start}..{result.end}: {result.bars} bars, final paper equity "
                      f"{result.final_equity:,.2f}; {replays.verdict(result)}; plot {result.plot}")
    elif once:
        console.print(traded(_stage("trade", lambda: deliver(cfg))))
    else:
        _stage("trade", lambda: live.forever(cfg, lambda r: console.print(traded(r))))


def _broker_headers(cfg: Params) -> dict[str, str]:
    """The local broker's API-key headers, which its health check sends."""
    from tasks.delivery.keys import local_keys

    return local_keys(cfg).headers()


@app.command()
def up(params: ParamsPath = Path("params.yaml"), set_: Overrides = []) -> None:  # noqa: B006
    """Start the local Prefect server, MLflow server, receiver, paper broker and deployment runner on
    127.0.0.1, and the supervisor that restarts any of them that dies."""
    from deploy.local import services

    cfg = _stage("config", lambda: _params(params, set_, clients=False))
    from deploy.local.webhook import ensure_webhook

    running = _stage("up", lambda: services.up(cfg, _broker_headers(cfg),
                                               say=lambda line: console.print(f"  {line}")))
    _stage("up", lambda: ensure_webhook(cfg))
    console.print(_services_table([(r, True, True) for r in running]))


@app.command()
def down(params: ParamsPath = Path("params.yaml"), set_: Overrides = []) -> None:  # noqa: B006
    """Stop the supervisor, then the services `podracer up` started (by their recorded PIDs)."""
    from deploy.local import services

    cfg = _stage("config", lambda: _params(params, set_, clients=False))
    stopped = _stage("down", lambda: services.down(cfg, say=lambda line: console.print(f"  {line}")))
    console.print(f"[green]✓ down[/] {len(stopped)} service(s) stopped" if stopped else "nothing was running")


@app.command()
def status(params: ParamsPath = Path("params.yaml"), set_: Overrides = []) -> None:  # noqa: B006
    """What `podracer up` started: each service's PID, URL, whether it answers, its restarts and their last
    reason; the supervisor; the registry's aliases."""
    from deploy.local import services

    cfg = _stage("config", lambda: _params(params, set_, clients=False))
    rows = _stage("status", lambda: services.status(cfg, _broker_headers(cfg)))
    console.print(_services_table(rows) if rows else "no services recorded (start them with `podracer up`)")
    for line in _service_addresses(rows):
        console.print(line, soft_wrap=True, highlight=False)
    for service, _, _ in rows:
        if service.state == "gave up":  # the whole reason, on one line
            console.print(f"[bold red]✗ {service.name}:[/] {escape(service.reason)}", soft_wrap=True, highlight=False)
    if rows:
        console.print(escape(services.watching(cfg)), soft_wrap=True, highlight=False)
    for line in _stage("status", lambda: _registry_lines(cfg, rows)):
        console.print(line, soft_wrap=True, highlight=False)


def _registry_lines(cfg: Params, rows: list) -> list[str]:
    """The registry's aliases and, under them, the shadow's version, record and paper equity
    (docs/delivery.md, Shadow accounts); nothing when there is no registry yet."""
    from tasks.delivery.client import standing
    from tasks.delivery.keys import CHAMPION, SHADOW
    from tasks.registry.aliases import PREVIOUS

    aliases = standing.registry_aliases(cfg.registry)
    if not aliases:
        return []
    lines = [f"[bold]registry[/] {cfg.registry.model_name}: "
             + ", ".join(f"{alias} version {version}" for alias, version in sorted(aliases.items()))]
    watched = standing.watch_lines(cfg.registry, aliases.get(CHAMPION), aliases.get(PREVIOUS))
    lines += ["  " + escape(line) for line in watched]
    if SHADOW in aliases:
        broker = next((s.url for s, _, healthy in rows if s.name == "broker" and healthy),
                      f"http://127.0.0.1:{cfg.broker.port}")
        lines.append("  " + escape(standing.shadow_standing(cfg, aliases[SHADOW], broker).line()))
    return lines


def _service_addresses(rows: list) -> list[str]:
    """Each service's URL and log path, whole, one line each: a table column would cut them to
    fit a narrow terminal, and a cut URL cannot be opened."""
    return [f"  {escape(service.name)}: {escape(service.url)}  log {escape(service.log)}" for service, _, _ in rows]


def _services_table(rows: list) -> Table:
    """Each service, whether it answers now, and what the supervisor did with it (its URL and
    log path follow the table, whole: :func:`_service_addresses`)."""
    table = Table("service", "pid", "state", "restarts", "last reason", title="podracer services")
    for service, running, healthy in rows:
        state = ("[green]answers[/]" if healthy else "[red]gave up[/]" if service.state == "gave up"
                 else f"[yellow]{service.state}[/]" if service.state in ("starting", "restarting")
                 else "[yellow]runs, not answering[/]" if running else "[red]stopped[/]")
        reason = service.reason if len(service.reason) <= 40 else service.reason[:39] + "…"
        table.add_row(service.name, str(service.pid), state, str(service.restarts), escape(reason))
    return table


def main() -> None:
    app()


if __name__ == "__main__":
    main()
