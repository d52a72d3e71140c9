"""One planted bug of docs/testing.md's table (Planted bugs): an edit of today's code and the tests that
must fail with it and pass without it. ``tests/mutation/planted.py`` plants each in a copy of the tree."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Bug:
    """Replace ``old``, found exactly once in ``path``, by ``new``; then ``tests`` must fail."""

    what: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


Entry = Bug | tuple[Bug, ...]
"""A row of the table: one plant, or several (a row's "two plants"), each planted alone and each caught."""
