"""The registry's aliases: who holds them, and how they move (docs/operations.md, the gate).

Aliases, not stages (MLflow has deprecated stages): ``challenger`` (the newest version),
``champion`` (trades), ``previous_champion`` (``podracer rollback``) and ``shadow``. The
gate's decisions (:mod:`tasks.registry.decision`) are acted on here, kept apart from the
logging in :mod:`tasks.registry.register` so that they can be tested on their own; delivery
and the runner's polls read them here too.

:func:`promote` moves ``champion``, records ``previous_champion`` and takes ``challenger``
and ``shadow`` off the new champion. An alias moved by hand, in the MLflow UI or over its
REST API, moves ``champion`` alone. :func:`note_hand_move` then leaves the aliases as
``promote`` would have: the version that traded before becomes ``previous_champion``, so
that ``podracer rollback`` restores it, and the new champion stops being the challenger or
the shadow.
"""

from __future__ import annotations

import logging

from tasks.config import RegistryParams
from tasks.errors import MissingInput
from tasks.registry.store import client

log = logging.getLogger("podracer.aliases")

CHAMPION, CHALLENGER, PREVIOUS, SHADOW = "champion", "challenger", "previous_champion", "shadow"

DATA_VERSION = "data_version"
"""The version tag that names the data a version was trained on (:mod:`tasks.registry.register` writes it)."""


def alias_version(registry: RegistryParams, alias: str) -> str | None:
    """The version that carries ``alias``, or None."""
    import mlflow

    try:
        return str(client(registry).get_model_version_by_alias(registry.model_name, alias).version)
    except mlflow.exceptions.MlflowException:
        return None


def champion_version(registry: RegistryParams) -> str | None:
    """The version that carries the ``champion`` alias, or None."""
    return alias_version(registry, CHAMPION)


def promote(registry: RegistryParams, version: str) -> str | None:
    """Give ``version`` the champion alias; the old champion becomes ``previous_champion``.

    Returns the previous champion's version, if there was one. A version that was the
    challenger or the shadow stops being one. An unknown version is a one-line
    :class:`MissingInput`.
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
    drop_roles(registry, version)
    return previous if previous != version else None


def drop_roles(registry: RegistryParams, version: str) -> list[str]:
    """Take ``challenger`` and ``shadow`` off ``version``, a champion now; returns those it carried."""
    dropped = [alias for alias in (CHALLENGER, SHADOW) if alias_version(registry, alias) == version]
    for alias in dropped:
        client(registry).delete_registered_model_alias(registry.model_name, alias)
    return dropped


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


def note_hand_move(registry: RegistryParams, delivered: str | None) -> str | None:
    """Finish a hand move of ``champion`` as :func:`promote` would have.

    ``delivered`` is the version that traded last (None before any). When ``champion`` has
    moved away from it and ``previous_champion`` is something else, the alias was moved by
    hand: ``delivered`` becomes ``previous_champion``. Whatever ``delivered`` is, a champion
    that still carries ``challenger`` or ``shadow`` loses them: ``promote`` never leaves a
    champion carrying either, so only a hand move does (this also covers the first champion
    set by hand, and a hand move made before the gate's promotion was delivered).

    ``promote`` itself is not called: it would set ``champion`` again, which fires the
    webhook a second time, and it would record the replaced champion rather than the one
    that traded; the two share :func:`drop_roles`. Returns the version
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
