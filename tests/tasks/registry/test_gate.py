"""The champion gate on metrics a hair either side of the margin, and the aliases it moves.

The alias tests register bare model versions in a throwaway sqlite store (no model
files), so they run in seconds and need no trained pipeline.
"""

import pytest

from tasks.config import RegistryParams
from tasks.errors import MissingInput
from tasks.registry.gate import (
    CHALLENGER,
    CHAMPION,
    PREVIOUS,
    alias_version,
    challenge,
    champion_version,
    gate,
    promote,
    rollback,
)
from tasks.registry.store import client

HAIR = 1e-9


def metrics(agent: float, hold: float, metric: str = "sharpe") -> dict[str, dict[str, float]]:
    other = {"sharpe": 0.0, "calmar": 0.0}
    return {"agent": {**other, metric: agent}, "buy_and_hold": {**other, metric: hold}}


@pytest.mark.parametrize("margin", [0.0, 0.1, -0.2])
def test_the_gate_passes_a_hair_above_the_margin_and_refuses_a_hair_below(margin):
    registry = RegistryParams(gate_margin=margin)
    hold = 0.5
    assert gate(registry, metrics(hold + margin + HAIR, hold)) == (
        True, f"test sharpe {hold + margin:.3f} > buy-and-hold 0.500 + margin {margin:g}")
    assert gate(registry, metrics(hold + margin - HAIR, hold))[0] is False
    assert gate(registry, metrics(hold + margin, hold))[0] is False  # a tie is not a win


def test_a_challenger_that_loses_to_buy_and_hold_is_refused_with_the_reason():
    passed, reason = gate(RegistryParams(), metrics(0.3, 0.8))
    assert not passed and reason == "test sharpe 0.300 <= buy-and-hold 0.800 + margin 0"


def test_the_gate_reads_the_configured_metric_only():
    registry = RegistryParams(gate_metric="calmar")
    assert gate(registry, {"agent": {"sharpe": -5.0, "calmar": 1.2},
                           "buy_and_hold": {"sharpe": 5.0, "calmar": 1.1}})[0] is True
    assert gate(registry, {"agent": {"sharpe": 5.0, "calmar": 1.0},
                           "buy_and_hold": {"sharpe": -5.0, "calmar": 1.1}})[0] is False


def aliases(registry: RegistryParams) -> dict[str, str]:
    return {a: str(v) for a, v in client(registry).get_registered_model(registry.model_name).aliases.items()}


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


def window(challenger: float, champion: float | None, hold: float) -> dict[str, dict[str, float]]:
    arms = {"challenger": {"sharpe": challenger}, "buy_and_hold": {"sharpe": hold}}
    return arms if champion is None else {**arms, "champion": {"sharpe": champion}}


@pytest.mark.parametrize("margin", [0.0, 0.1])
def test_a_challenger_must_beat_the_champion_by_the_margin_and_buy_and_hold(margin):
    registry = RegistryParams(gate_margin=margin)
    champ, hold = 1.0, 0.5
    assert challenge(registry, window(champ + margin + HAIR, champ, hold)) == (
        True, f"window sharpe: challenger {champ + margin:.3f} > champion 1.000 + margin {margin:g}, "
              "and > buy-and-hold 0.500")
    assert challenge(registry, window(champ + margin - HAIR, champ, hold))[0] is False
    assert challenge(registry, window(champ + margin, champ, hold))[0] is False  # a tie is not a win
    # beating the champion is not enough: buy-and-hold too (a champion worse than holding)
    verdict, reason = challenge(registry, window(0.3 + margin, 0.2, 0.6))
    assert not verdict and reason.endswith(f"+ margin {margin:g}, and <= buy-and-hold 0.600")


def test_the_first_model_faces_buy_and_hold_alone():
    assert challenge(RegistryParams(), window(0.6, None, 0.5)) == (
        True, "no champion yet: window sharpe 0.600 > buy-and-hold 0.500 + margin 0")
    assert challenge(RegistryParams(), window(0.4, None, 0.5))[0] is False


def test_rollback_moves_the_champion_back_and_back_again(registry):
    with pytest.raises(MissingInput, match="no previous_champion to roll back to"):
        rollback(registry)
    promote(registry, "1")
    promote(registry, "3")
    assert rollback(registry) == ("1", "3") and aliases(registry) == {CHAMPION: "1", PREVIOUS: "3"}
    assert rollback(registry) == ("3", "1") and aliases(registry) == {CHAMPION: "3", PREVIOUS: "1"}
