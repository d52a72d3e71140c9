"""The data stages' progress lines: a handful per stage, always the last one."""

from __future__ import annotations

import logging

import pytest

from tasks.progress import Steps


def test_logs_the_last_step_and_throttles_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("podracer.test-progress")
    with caplog.at_level(logging.INFO, logger=log.name):
        steps = Steps(log, "features", 100, "symbols", every=3600.0)
        for _ in range(100):
            steps.step()
    assert [r.getMessage() for r in caplog.records] == ["features: 100/100 symbols, 0 s"]


def test_unknown_total_logs_on_time_only(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("podracer.test-progress")
    with caplog.at_level(logging.INFO, logger=log.name):
        quiet = Steps(log, "ingest", 0, "symbols", every=3600.0)
        quiet.step(5)
        chatty = Steps(log, "ingest", 0, "symbols", every=0.0)
        chatty.step(2)
    assert [r.getMessage().rsplit(",", 1)[0] for r in caplog.records] == ["ingest: 2 symbols"]
