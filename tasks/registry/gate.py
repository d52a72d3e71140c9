"""The champion gate and the registry aliases it moves (docs/design.md, registry and delivery).

A new version gets the alias ``challenger``. It becomes ``champion`` only if it beats
buy-and-hold on ``registry.gate_metric`` by more than ``registry.gate_margin`` on the test
window; the champion it replaces becomes ``previous_champion``. Aliases, not stages:
MLflow has deprecated stages. These are the registry's decisions, kept apart from the
logging in :mod:`tasks.registry.register` so that they can be tested on their own.
"""

from __future__ import annotations

from tasks.config import RegistryParams
from tasks.errors import MissingInput
from tasks.registry.store import client

CHAMPION, CHALLENGER, PREVIOUS = "champion", "challenger", "previous_champion"


def gate(registry: RegistryParams, metrics: dict[str, dict[str, float]]) -> tuple[bool, str]:
    """Does the challenger beat buy-and-hold on the gate metric by more than the margin?

    ``metrics`` holds the backtest's ``agent`` and ``buy_and_hold`` metrics. Returns the
    verdict and the one line that says why, as the register stage logs it.
    """
    name, margin = registry.gate_metric, registry.gate_margin
    agent, hold = metrics["agent"][name], metrics["buy_and_hold"][name]
    verdict = agent > hold + margin
    relation = ">" if verdict else "<="
    return verdict, f"test {name} {agent:.3f} {relation} buy-and-hold {hold:.3f} + margin {margin:g}"


def challenge(registry: RegistryParams, metrics: dict[str, dict[str, float]]) -> tuple[bool, str]:
    """The continuous-training gate, on one evaluation window (docs/operations.md, the CT cycle).

    ``metrics`` holds ``challenger``, ``buy_and_hold`` and, unless this is the first model,
    ``champion``. The challenger must beat the champion by more than ``registry.gate_margin``
    on the gate metric *and* beat buy-and-hold; without a champion it faces buy-and-hold
    alone, as the pipeline's gate does. Returns the verdict and the line that says why.
    """
    name, margin = registry.gate_metric, registry.gate_margin
    if "champion" not in metrics:
        verdict, reason = gate(registry, {"agent": metrics["challenger"], "buy_and_hold": metrics["buy_and_hold"]})
        return verdict, f"no champion yet: {reason.replace('test ', 'window ', 1)}"
    new, old, hold = (metrics[k][name] for k in ("challenger", "champion", "buy_and_hold"))
    beats_champion, beats_hold = new > old + margin, new > hold
    reason = (f"window {name}: challenger {new:.3f} {'>' if beats_champion else '<='} champion {old:.3f} "
              f"+ margin {margin:g}, and {'>' if beats_hold else '<='} buy-and-hold {hold:.3f}")
    return beats_champion and beats_hold, reason


def alias_version(registry: RegistryParams, alias: str) -> str | None:
    """The version that carries ``alias``, or None."""
    import mlflow

    try:
        return str(client(registry).get_model_version_by_alias(registry.model_name, alias).version)
    except mlflow.exceptions.MlflowException:
        return None


def rollback(registry: RegistryParams) -> tuple[str, str]:
    """Move ``champion`` back to ``previous_champion`` (which becomes the rolled-back version),
    through the registry, so that the promotion trigger delivers again. Returns
    ``(restored, replaced)``; a one-line :class:`MissingInput` when there is nothing to go back to."""
    previous = alias_version(registry, PREVIOUS)
    if previous is None:
        raise MissingInput(f"{registry.model_name}: no previous_champion to roll back to")
    current = champion_version(registry)
    promote(registry, previous)
    return previous, current or "none"


def champion_version(registry: RegistryParams) -> str | None:
    """The version that carries the ``champion`` alias, or None."""
    return alias_version(registry, CHAMPION)


def promote(registry: RegistryParams, version: str) -> str | None:
    """Give ``version`` the champion alias; the old champion becomes ``previous_champion``.

    Returns the previous champion's version, if there was one. A version that was the
    challenger stops being one. An unknown version is a one-line :class:`MissingInput`.
    """
    import mlflow

    store, name = client(registry), registry.model_name
    try:
        store.get_model_version(name, version)
    except mlflow.exceptions.MlflowException:
        raise MissingInput(f"{name}: no version {version} in {registry.tracking_uri}") from None
    previous = champion_version(registry)
    if previous is not None and previous != version:
        store.set_registered_model_alias(name, PREVIOUS, previous)
    store.set_registered_model_alias(name, CHAMPION, version)
    if alias_version(registry, CHALLENGER) == version:
        store.delete_registered_model_alias(name, CHALLENGER)
    return previous if previous != version else None
