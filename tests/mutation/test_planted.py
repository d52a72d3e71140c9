"""The planted bugs' catalogue against docs/testing.md's table: every row can be planted again,
with as many plants as the row says, and every plant edits today's code into code that still
parses, and names tests that exist.

Planting them all takes about 40 minutes on 2 cores (``python -m tests.mutation.planted``); these checks take
about 4 seconds, so a change that moves a planted line, or a new row without its plant, fails here.
"""

from __future__ import annotations

import ast
import re

import pytest
import yaml

from tests.conftest import REPO
from tests.mutation.bug import Bug
from tests.mutation.bugs_benchmarks import BENCHMARKS
from tests.mutation.bugs_pipeline import PIPELINE
from tests.mutation.bugs_trainers import TRAINERS
from tests.mutation.planted import BUGS, current, plants

COUNTS = {"two plants": 2, "three plants": 3}


def table() -> dict[int, str]:
    """docs/testing.md's Planted bugs table: number -> the row's description."""
    text = (REPO / "docs" / "testing.md").read_text()
    section = text.split("\n## Planted bugs\n", 1)[1].split("\n## ", 1)[0]
    return {int(m[1]): m[2] for m in re.finditer(r"^\| (\d+) \| (.+?) \| .+ \|$", section, re.M)}


def test_every_row_of_the_table_has_as_many_plants_as_it_says() -> None:
    rows = table()
    assert len(rows) >= 110
    assert sorted(BUGS) == sorted(rows), {"rows without plants": sorted(set(rows) - set(BUGS)),
                                          "plants without rows": sorted(set(BUGS) - set(rows))}
    for number, row in rows.items():
        said = [count for words, count in COUNTS.items() if words in row]
        assert len(plants(number)) == (said[0] if said else 1), (number, row)


def test_the_catalogues_part_by_where_the_edit_lands() -> None:
    catalogues = {"trainers/": TRAINERS, "benchmarks/": BENCHMARKS, "": PIPELINE}
    assert sum(len(c) for c in catalogues.values()) == len(BUGS)  # no number in two catalogues
    for folder, catalogue in catalogues.items():
        for number in catalogue:
            for label, bug in plants(number):
                landed = next((f for f in catalogues if f and bug.path.startswith(f)), "")
                assert landed == folder, label


def settings(text: str) -> None:
    """``.env`` as ``tasks/settings.py`` reads it: each line blank, a ``#`` comment or ``KEY=VALUE``."""
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, sep, _ = line.partition("=")
            assert sep and key.strip().isidentifier(), f".env: {line!r} is not KEY=VALUE"


@pytest.mark.parametrize("number", sorted(BUGS))
def test_every_plant_edits_code_that_is_there_once_and_names_tests_that_exist(number: int) -> None:
    for label, bug in plants(number):
        assert isinstance(bug, Bug) and bug.new != bug.old, label
        assert current(bug), f"{label}: {bug.path} no longer holds, exactly once: {bug.old!r}"
        planted = (REPO / bug.path).read_text().replace(bug.old, bug.new)
        parse = ast.parse if bug.path.endswith(".py") else settings if bug.path == ".env" else yaml.safe_load
        parse(planted)  # a plant caught by a SyntaxError would prove nothing of the test
        assert bug.tests, label
        for test in bug.tests:
            path, _, name = test.partition("::")
            assert (REPO / path).is_file(), f"{label}: no {path}"
            name = name.split("[")[0].split("::")[-1]
            assert not name or re.search(rf"^\s*def {re.escape(name)}\(", (REPO / path).read_text(), re.M), (
                f"{label}: no test {name} in {path}")
