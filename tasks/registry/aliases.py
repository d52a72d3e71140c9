"""The registry's aliases as delivery and the runner's polls read them (docs/operations.md).

The gate (:mod:`tasks.registry.gate`) moves ``champion`` and keeps ``previous_champion``
right. An alias moved by hand, in the MLflow UI or over its REST API, moves ``champion``
alone: :func:`note_hand_move` then records the version that traded before as
``previous_champion``, so that ``podracer rollback`` restores it.
"""

from __future__ import annotations

from tasks.config import RegistryParams
from tasks.registry.gate import PREVIOUS, alias_version, champion_version
from tasks.registry.store import client

DATA_VERSION = "data_version"
"""The version tag that names the data a version was trained on (:mod:`tasks.registry.register` writes it)."""


def note_hand_move(registry: RegistryParams, delivered: str | None) -> str | None:
    """Make ``delivered`` (the version that traded last) ``previous_champion`` when ``champion``
    has moved away from it and ``previous_champion`` is something else: the alias was moved
    by hand. Returns the version recorded, or None when nothing needed fixing."""
    current = champion_version(registry)
    if delivered is None or current is None or delivered == current or alias_version(registry, PREVIOUS) == delivered:
        return None
    client(registry).set_registered_model_alias(registry.model_name, PREVIOUS, delivered)
    return delivered


def champion_data_version(registry: RegistryParams) -> str | None:
    """The data version the champion was trained on; None without a champion (or for one
    registered before versions carried the tag)."""
    version = champion_version(registry)
    if version is None:
        return None
    return client(registry).get_model_version(registry.model_name, version).tags.get(DATA_VERSION)
