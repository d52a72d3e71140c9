"""Typed errors whose message is the one line a user sees (no traceback)."""


class PodracerError(Exception):
    """Base class: the CLI prints ``str(error)`` on one line and exits 1."""


class ConfigError(PodracerError):
    """``params.yaml`` is unreadable, has an unknown key or a bad value."""


class DataError(PodracerError):
    """An input file or source does not meet the bars contract."""


class ValidationFailed(PodracerError):
    """Too many rows failed validation; they were quarantined."""


class MissingInput(PodracerError):
    """A stage's input is missing: an earlier stage has not run (or failed)."""


class TrainingFailed(PodracerError):
    """Training produced no policy to register: every agent's validation curve diverged."""
