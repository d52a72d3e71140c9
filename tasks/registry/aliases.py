"""The registry's aliases as delivery and the runner's polls read them (docs/operations.md).

The gate (:mod:`tasks.registry.gate`) moves ``champion`` with
:func:`~tasks.registry.gate.promote`, which also records ``previous_champion`` and takes
``challenger`` and ``shadow`` off the new champion. An alias moved by hand, in the MLflow UI
or over its REST API, moves ``champion`` alone. :func:`note_hand_move` then leaves the
aliases as ``promote`` would have: the version that traded before becomes
``previous_champion``, so that ``podracer rollback`` restores it, and the new champion
stops being the challenger or the shadow.
"""

from __future__ import annotations

import logging

from tasks.config import RegistryParams
from tasks.registry.gate import PREVIOUS, alias_version, champion_version, drop_roles
from tasks.registry.store import client

log = logging.getLogger("podracer.aliases")

DATA_VERSION = "data_version"
"""The version tag that names the data a version was trained on (:mod:`tasks.registry.register` writes it)."""


def note_hand_move(registry: RegistryParams, delivered: str | None) -> str | None:
    """Finish a hand move of ``champion`` as :func:`~tasks.registry.gate.promote` would have.

    ``delivered`` is the version that traded last (None before any). When ``champion`` has
    moved away from it and ``previous_champion`` is something else, the alias was moved by
    hand: ``delivered`` becomes ``previous_champion``. Whatever ``delivered`` is, a champion
    that still carries ``challenger`` or ``shadow`` loses them: ``promote`` never leaves a
    champion carrying either, so only a hand move does (this also covers the first champion
    set by hand, and a hand move made before the gate's promotion was delivered).

    ``promote`` itself is not called: it would set ``champion`` again, which fires the
    webhook a second time, and it would record the replaced champion rather than the one
    that traded; the two share :func:`~tasks.registry.gate.drop_roles`. Returns the version
    recorded as ``previous_champion``, or None.
    """
    current = champion_version(registry)
    if current is None:
        return None
    store, name = client(registry), registry.model_name
    recorded = None
    if delivered is not None and delivered != current and alias_version(registry, PREVIOUS) != delivered:
        store.set_registered_model_alias(name, PREVIOUS, delivered)
        recorded = delivered
    for alias in drop_roles(registry, current):
        log.info("champion %s of %s was moved by hand: it is no longer %s", current, name, alias)
    return recorded


def champion_data_version(registry: RegistryParams) -> str | None:
    """The data version the champion was trained on; None without a champion (or for one
    registered before versions carried the tag)."""
    version = champion_version(registry)
    if version is None:
        return None
    return client(registry).get_model_version(registry.model_name, version).tags.get(DATA_VERSION)
