"""Progress lines for the long data stages (a 10-year minute panel takes minutes per stage).

:class:`Steps` logs ``<stage>: i/n <unit>, <s> s`` (``i <unit>`` when n is unknown, 0) at most
every ``every`` seconds and at the last step, so a stage over 100 symbols prints a handful of
lines, not a hundred.
"""

from __future__ import annotations

import logging
import time


class Steps:
    def __init__(self, log: logging.Logger, stage: str, total: int, unit: str, every: float = 15.0) -> None:
        self.log, self.stage, self.total, self.unit, self.every = log, stage, total, unit, every
        self.done = 0
        self.started = self.last = time.monotonic()

    def step(self, count: int = 1) -> None:
        """``count`` more units done; logs when ``every`` seconds passed since the last line, or at the end."""
        self.done += count
        now = time.monotonic()
        if (self.total and self.done >= self.total) or now - self.last >= self.every:
            self.last = now
            of = f"/{self.total}" if self.total else ""
            self.log.info("%s: %d%s %s, %.0f s", self.stage, self.done, of, self.unit,  # pragma: no mutate
                          now - self.started)
