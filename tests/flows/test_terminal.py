"""Log lines and the progress bar share one console: a log line never lands inside the bar's line."""

from __future__ import annotations

import io
import logging
import sys

import pytest
from rich.console import Console
from rich.progress import BarColumn, Progress, TimeElapsedColumn

from flows.terminal import CONSOLE, ConsoleHandler, every_logger, share_console


def training_screen(monkeypatch: pytest.MonkeyPatch, share: bool) -> str:
    """What a terminal shows when a stage logs while training's progress bar is live."""
    screen = io.StringIO()
    monkeypatch.setattr(sys, "stderr", screen)  # the terminal: logs and the bar reach the same screen
    console = Console(file=screen, force_terminal=True, width=60, color_system=None)
    logger = logging.getLogger("podracer.test_terminal")
    logger.propagate = False
    handler = logging.StreamHandler(sys.stderr)  # as Prefect's console handler writes: to stderr, by itself
    handler.setFormatter(logging.Formatter("%(levelname)s | %(message)s"))
    monkeypatch.setattr(logger, "handlers", [handler])
    logger.setLevel(logging.INFO)
    if share:
        assert share_console(console, [logger]) == 1
        assert isinstance(logger.handlers[0], ConsoleHandler) and logger.handlers[0].formatter is handler.formatter
    with Progress("train", BarColumn(), TimeElapsedColumn(), console=console, auto_refresh=False) as progress:
        bar = progress.add_task("train", total=2)
        progress.refresh()
        logger.info("generation 0 agent 1: validation sharpe [0.5]")
        progress.advance(bar)
        progress.refresh()
    return screen.getvalue()


def test_a_log_line_is_printed_above_the_live_bar(monkeypatch):
    screen = training_screen(monkeypatch, share=True)
    # rich clears the bar's line, prints the log line whole (brackets and all), then redraws the bar
    assert "\r\x1b[2KINFO | generation 0 agent 1: validation sharpe [0.5]\ntrain" in screen


def test_without_the_shared_console_the_log_line_lands_in_the_bar(monkeypatch):
    screen = training_screen(monkeypatch, share=False)
    assert "0:00:00INFO | generation 0" in screen  # the garbled line the shared console prevents


def test_the_cli_rebinds_prefects_console_handler_to_the_one_console():
    from prefect.logging.handlers import PrefectConsoleHandler

    root = logging.getLogger()
    saved = {logger: list(logger.handlers) for logger in every_logger()}
    prefects = PrefectConsoleHandler(stream=sys.stderr)  # what Prefect's logging.yml puts on the root logger
    prefects.setFormatter(logging.Formatter("%(levelname)s | %(message)s"))
    try:
        root.handlers[:] = [prefects]
        share_console()
        [handler] = root.handlers
        assert isinstance(handler, ConsoleHandler) and handler.console is CONSOLE
        assert handler.formatter is prefects.formatter
    finally:
        for logger, handlers in saved.items():
            logger.handlers[:] = handlers
