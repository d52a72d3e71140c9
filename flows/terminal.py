"""One terminal: log lines and progress bars share one rich console.

rich draws a live progress bar (training's, :func:`training_bar`, which the CLI and the
flows hand to ``tasks/model/train.py``) on the console it is given, by default rich's
global console. A log handler that writes to the terminal by itself
(Prefect's console handler, a ``StreamHandler`` on stderr) prints into the bar's line instead:
``… 0:00:1502:04:25.155 | INFO …``. :func:`share_console` binds every such handler to that
one console, :data:`CONSOLE`, so rich prints each log line above the live bar and redraws the
bar below it. The CLI prints its own lines through :data:`CONSOLE` too.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import rich
from rich.console import Console
from rich.logging import RichHandler
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

if TYPE_CHECKING:  # the CLI imports this module without the training stack
    from tasks.model.train import Bar, Update

CONSOLE: Console = rich.get_console()
"""The console of every command: rich's global one, which progress bars use by default."""
LEVEL_STYLES = {logging.WARNING: "yellow", logging.ERROR: "red", logging.CRITICAL: "bold red"}


class ConsoleHandler(logging.Handler):
    """Prints each record, formatted as before, through a rich console: as plain text (a
    message may hold ``[brackets]`` that rich markup would eat) on one soft-wrapped line."""

    def __init__(self, console: Console = CONSOLE, level: int = logging.NOTSET) -> None:
        super().__init__(level)
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = Text(self.format(record), style=LEVEL_STYLES.get(record.levelno, ""))
            self.console.print(text, soft_wrap=True, highlight=False)
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)


def writes_to_terminal(handler: logging.Handler) -> bool:
    """A handler that prints to the terminal on its own: Prefect's console handler, a rich
    handler, or a stream handler on stdout / stderr (not a file, not a test's capture)."""
    if isinstance(handler, ConsoleHandler):
        return False
    if isinstance(handler, RichHandler) or type(handler).__name__ == "PrefectConsoleHandler":
        return True
    standard = (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)
    return isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler) \
        and any(handler.stream is stream for stream in standard)


def every_logger() -> list[logging.Logger]:
    """The root logger and every named logger created so far."""
    return [logging.getLogger(), *(lg for lg in logging.Logger.manager.loggerDict.values()
                                   if isinstance(lg, logging.Logger))]


def share_console(console: Console = CONSOLE, loggers: list[logging.Logger] | None = None) -> int:
    """Bind every terminal log handler of ``loggers`` (default: the root logger and every
    named logger) to ``console``, keeping its level, formatter and filters; return how many
    were rebound."""
    loggers = every_logger() if loggers is None else loggers
    rebound = 0
    for logger in loggers:
        for i, old in enumerate(list(logger.handlers)):
            if not writes_to_terminal(old):
                continue
            if isinstance(old, RichHandler):
                old.console = console
            else:
                new = ConsoleHandler(console, old.level)
                new.setFormatter(old.formatter)
                for f in old.filters:
                    new.addFilter(f)
                logger.handlers[i] = new
            rebound += 1
    return rebound


@contextmanager
def training_bar(bar: Bar) -> Iterator[Update]:
    """Training's live progress bar: ``train generational on multiplexed generation 3/32``, the
    bar, evaluations done of all, the best validation fitness so far and the time taken."""
    with Progress(
        TextColumn(f"[bold]train[/] {bar.title}" + " {task.fields[at]}"), BarColumn(),
        MofNCompleteColumn(), TextColumn(f"best validation {bar.fitness} " + "{task.fields[best]}"),
        TimeElapsedColumn(), transient=False,
    ) as progress:
        task = progress.add_task("train", total=bar.total, at="", best="-")
        progress.update(task, completed=bar.completed)

        def update(at: str, best: float) -> None:
            progress.update(task, advance=1, at=at, best=f"{best:.2f}")

        yield update
