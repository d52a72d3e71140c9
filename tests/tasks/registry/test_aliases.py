"""An alias moved by hand, fixed so that a rollback restores what traded before, and the
champion's data version as the runner's data poll reads it.

Bare model versions in a throwaway sqlite store (no model files): seconds, no pipeline.
"""

import pytest

from tasks.config import RegistryParams
from tasks.registry.aliases import DATA_VERSION, champion_data_version, note_hand_move
from tasks.registry.gate import CHAMPION, PREVIOUS, promote, rollback
from tasks.registry.store import client


@pytest.fixture
def registry(registry: RegistryParams) -> RegistryParams:
    """The shared store (conftest.py), version 2 tagged with its data version."""
    client(registry).set_model_version_tag(registry.model_name, "2", DATA_VERSION, "d2")
    return registry


def aliases(registry: RegistryParams) -> dict[str, str]:
    return {a: str(v) for a, v in client(registry).get_registered_model(registry.model_name).aliases.items()}


def by_hand(registry: RegistryParams, version: str) -> None:
    """What the MLflow UI does: move ``champion`` alone."""
    client(registry).set_registered_model_alias(registry.model_name, CHAMPION, version)


def test_a_hand_move_makes_what_traded_before_previous_champion_so_rollback_restores_it(registry):
    promote(registry, "1")
    by_hand(registry, "3")  # version 1 traded; nobody set previous_champion
    assert aliases(registry) == {CHAMPION: "3"}
    assert note_hand_move(registry, "1") == "1"
    assert aliases(registry) == {CHAMPION: "3", PREVIOUS: "1"}
    assert rollback(registry) == ("1", "3")


def test_nothing_to_fix_when_the_gate_moved_the_alias_or_nothing_moved(registry):
    assert note_hand_move(registry, "1") is None  # no champion at all
    promote(registry, "1")
    assert note_hand_move(registry, None) is None  # nothing traded yet
    assert note_hand_move(registry, "1") is None  # the champion traded: no move
    promote(registry, "2")  # the gate sets previous_champion itself
    assert note_hand_move(registry, "1") is None and aliases(registry) == {CHAMPION: "2", PREVIOUS: "1"}
    by_hand(registry, "3")
    assert note_hand_move(registry, "2") == "2"  # a hand move replaces an older previous_champion
    assert aliases(registry) == {CHAMPION: "3", PREVIOUS: "2"}


def test_the_champions_data_version_is_its_tag(registry):
    assert champion_data_version(registry) is None  # no champion
    promote(registry, "1")
    assert champion_data_version(registry) is None  # registered without the tag
    promote(registry, "2")
    assert champion_data_version(registry) == "d2"
