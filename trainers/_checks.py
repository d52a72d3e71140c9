"""Tiny validation helper shared by the trainers' config dataclasses.

The dataclasses stay free of pydantic; pydantic validates them as fields of the
project config and turns a ``ValueError`` raised here into a one-line error.
"""


def require(condition: bool, message: str) -> None:
    """Raise ``ValueError(message)`` unless ``condition`` holds."""
    if not condition:
        raise ValueError(message)
