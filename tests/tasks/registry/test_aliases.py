"""The aliases the gate moves (promote, rollback), an alias moved by hand, fixed so that the
aliases end as ``podracer promote`` leaves them (a rollback restores what traded before; the
champion is no longer challenger or shadow), and the champion's data version as the runner's
data poll reads it.

Bare model versions in a throwaway sqlite store (no model files): seconds, no pipeline.
"""

import pytest

from tasks.config import RegistryParams
from tasks.errors import MissingInput
from tasks.registry.aliases import (
    CHALLENGER,
    CHAMPION,
    DATA_VERSION,
    PREVIOUS,
    SHADOW,
    alias_version,
    champion_data_version,
    champion_version,
    note_hand_move,
    promote,
    rollback,
)
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


def set_aliases(registry: RegistryParams, wanted: dict[str, str]) -> None:
    """Replace every alias of the model with ``wanted``."""
    store = client(registry)
    for alias in aliases(registry):
        store.delete_registered_model_alias(registry.model_name, alias)
    for alias, version in wanted.items():
        store.set_registered_model_alias(registry.model_name, alias, version)
    assert aliases(registry) == wanted


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


@pytest.mark.parametrize(
    ("before", "target", "expected"),
    [
        # the newest version, made champion in the UI
        ({CHAMPION: "1", CHALLENGER: "3"}, "3", {CHAMPION: "3", PREVIOUS: "1"}),
        # the shadow, made champion: the challenger, another version, stays
        ({CHAMPION: "1", SHADOW: "2", CHALLENGER: "3"}, "2", {CHAMPION: "2", PREVIOUS: "1", CHALLENGER: "3"}),
        # a challenger that trades in shadow
        ({CHAMPION: "1", CHALLENGER: "3", SHADOW: "3"}, "3", {CHAMPION: "3", PREVIOUS: "1"}),
        # the first champion, set by hand: nothing traded before it
        ({CHALLENGER: "3"}, "3", {CHAMPION: "3"}),
    ],
)
def test_a_hand_move_leaves_the_aliases_podracer_promote_would(registry, before, target, expected):
    set_aliases(registry, before)
    promote(registry, target)
    promoted = aliases(registry)
    set_aliases(registry, before)
    by_hand(registry, target)
    delivered = before.get(CHAMPION)  # the champion before the move is the one that traded
    assert note_hand_move(registry, delivered) == delivered
    assert aliases(registry) == promoted == expected
    assert note_hand_move(registry, target) is None and aliases(registry) == expected  # once done, nothing to fix


def test_a_hand_move_before_the_gates_promotion_was_delivered_still_clears_the_challenger(registry):
    promote(registry, "1")  # version 1 traded
    promote(registry, "2")  # the gate's promotion, not delivered yet: previous_champion is already 1
    set_aliases(registry, {**aliases(registry), CHALLENGER: "3"})
    by_hand(registry, "3")
    assert note_hand_move(registry, "1") is None  # previous_champion is what traded: nothing to record
    assert aliases(registry) == {CHAMPION: "3", PREVIOUS: "1"}


def test_the_champions_data_version_is_its_tag(registry):
    assert champion_data_version(registry) is None  # no champion
    promote(registry, "1")
    assert champion_data_version(registry) is None  # registered without the tag
    promote(registry, "2")
    assert champion_data_version(registry) == "d2"


def test_promotion_moves_champion_to_previous_and_clears_the_challenger(registry):
    assert champion_version(registry) is None
    assert promote(registry, "1") is None and aliases(registry) == {CHAMPION: "1"}
    client(registry).set_registered_model_alias(registry.model_name, CHALLENGER, "2")
    assert promote(registry, "2") == "1"
    assert aliases(registry) == {CHAMPION: "2", PREVIOUS: "1"}
    assert promote(registry, "2") is None and aliases(registry) == {CHAMPION: "2", PREVIOUS: "1"}  # idempotent
    client(registry).set_registered_model_alias(registry.model_name, CHALLENGER, "3")
    assert promote(registry, "1") == "2"  # a hand promotion leaves another version's challenger alias alone
    assert aliases(registry) == {CHAMPION: "1", PREVIOUS: "2", CHALLENGER: "3"}
    assert alias_version(registry, "no-such-alias") is None
    client(registry).set_registered_model_alias(registry.model_name, SHADOW, "3")
    assert promote(registry, "3") == "1" and aliases(registry) == {CHAMPION: "3", PREVIOUS: "1"}  # shadow cleared


def test_promoting_an_unknown_version_is_one_line_and_moves_nothing(registry):
    promote(registry, "1")
    with pytest.raises(MissingInput, match=r"^podracer-ppo: no version 7 in sqlite:///.*mlflow\.db$"):
        promote(registry, "7")
    assert aliases(registry) == {CHAMPION: "1"}


def test_the_client_uses_the_configured_store_whatever_mlflow_was_pointed_at(registry, tmp_path):
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'elsewhere.db'}")
    mlflow.set_registry_uri(f"sqlite:///{tmp_path / 'elsewhere.db'}")
    assert promote(registry, "3") is None and aliases(registry) == {CHAMPION: "3"}


def test_rollback_moves_the_champion_back_and_back_again(registry):
    with pytest.raises(MissingInput, match="no previous_champion to roll back to"):
        rollback(registry)
    promote(registry, "1")
    promote(registry, "3")
    assert rollback(registry) == ("1", "3") and aliases(registry) == {CHAMPION: "1", PREVIOUS: "3"}
    assert rollback(registry) == ("3", "1") and aliases(registry) == {CHAMPION: "3", PREVIOUS: "1"}
