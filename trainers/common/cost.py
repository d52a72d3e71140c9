"""The cost ledger: what a job or a run has spent (env steps, CPU and GPU seconds) against its
budgets (nitro §5.3). Every learner's job charges one, whatever trains it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields

from trainers._checks import require


@dataclass
class CostLedger:
    """What training has spent (env steps, CPU and GPU seconds) against its budgets (None = unlimited).

    The env-step budget is hard: env steps are known before the work (envs × horizon), so callers check
    :meth:`affordable` first, and :meth:`charge` raises ``ValueError`` exactly when that check would have
    failed, recording nothing. Seconds are measured after the work, so a seconds budget may be overrun by the
    last charge; once reached, nothing more is affordable. Ledgers add up (``a + b``, ``sum(ledgers)``) into a
    run total, with budgets summed (unlimited if either is).
    """

    max_env_steps: int | None = None
    max_cpu_seconds: float | None = None
    max_gpu_seconds: float | None = None
    env_steps: int = 0
    cpu_seconds: float = 0.0
    gpu_seconds: float = 0.0

    def __post_init__(self) -> None:
        budgets = (self.max_env_steps, self.max_cpu_seconds, self.max_gpu_seconds)
        require(all(b is None or b >= 0 for b in budgets), "budgets must be >= 0")
        require(min(self.env_steps, self.cpu_seconds, self.gpu_seconds) >= 0, "spending must be >= 0")
        require(self.max_env_steps is None or self.env_steps <= self.max_env_steps, "env steps exceed the budget")

    @property
    def remaining_env_steps(self) -> int | None:
        return None if self.max_env_steps is None else self.max_env_steps - self.env_steps

    @property
    def _seconds_spent(self) -> bool:
        return any(limit is not None and used >= limit
                   for used, limit in ((self.cpu_seconds, self.max_cpu_seconds),
                                       (self.gpu_seconds, self.max_gpu_seconds)))

    def affordable(self, env_steps: int) -> bool:
        """Whether charging ``env_steps`` stays within the budget."""
        remaining = self.remaining_env_steps
        return env_steps >= 0 and not self._seconds_spent and (remaining is None or env_steps <= remaining)

    def charge(self, env_steps: int, cpu_seconds: float = 0.0, gpu_seconds: float = 0.0) -> None:
        """Record a round's spending; raises ``ValueError`` (recording nothing) if it is not affordable."""
        require(min(env_steps, cpu_seconds, gpu_seconds) >= 0, "charges must be >= 0")
        require(self.affordable(env_steps), f"charging {env_steps} env steps overruns the budget "
                f"({self.remaining_env_steps} left; a seconds budget spent: {self._seconds_spent})")
        self.env_steps += env_steps
        self.cpu_seconds += cpu_seconds
        self.gpu_seconds += gpu_seconds

    @contextmanager
    def meter(self, env_steps: int, gpu: bool = False) -> Iterator[None]:
        """Charge ``env_steps`` and the CPU seconds (all threads of this process) the block
        takes, plus its wall seconds as GPU seconds when it ran on a GPU."""
        require(self.affordable(env_steps),
                f"{env_steps} env steps overrun the budget ({self.remaining_env_steps} left)")
        cpu, wall = time.process_time(), time.perf_counter()
        yield
        self.charge(env_steps, time.process_time() - cpu, time.perf_counter() - wall if gpu else 0.0)

    def as_dict(self) -> dict[str, int | float | None]:
        """Budgets and spending as plain values; ``CostLedger(**d)`` restores the ledger."""
        return asdict(self)

    def __add__(self, other: CostLedger) -> CostLedger:
        def total(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None else a + b

        return CostLedger(**{f.name: total(getattr(self, f.name), getattr(other, f.name)) for f in fields(self)})

    def __radd__(self, other: object) -> CostLedger:
        """``sum(ledgers)`` starts from 0."""
        if other == 0:
            return CostLedger(**self.as_dict())
        return NotImplemented
