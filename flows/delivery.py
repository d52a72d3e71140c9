"""The Prefect flows of delivery: ``deliver_champion`` (on promotion) and ``trade_session`` (on a schedule).

Wiring only. ``deliver_champion`` runs when the ``champion`` alias moves: the MLflow webhook
receiver, or the registry poll that covers lost webhooks, emits ``podracer.model.promoted``
and the runner, listening for it, runs it in its own process
(:func:`flows.deployments.listen_promotions`). Delivery is
idempotent: a version trades a bar once (client order ids are version × bar × symbol), so
the same alias set twice, or a webhook and a poll for one move, deliver once.
"""

from __future__ import annotations

import logging

from prefect import flow

from flows.stages import deliver_task
from tasks.config import Params, load_params
from tasks.delivery.client.deliver import delivered_version
from tasks.delivery.client.loop import CycleResult
from tasks.registry.aliases import champion_version, note_hand_move

log = logging.getLogger("podracer.deliver")


@flow(name="deliver")
def deliver_champion(params: Params | None = None, version: str | None = None) -> CycleResult | None:
    """Trade the latest bar with the champion. ``version`` is the one the event announced;
    if the alias has moved on since, the current champion trades (the later event is then
    already satisfied)."""
    params = params or load_params()
    current = champion_version(params.registry)
    if current is None:
        return None
    if version is not None and str(version) != current:
        log.info("champion moved on from version %s to %s: delivering %s", version, current, current)
    note_hand_move(params.registry, delivered_version(params))  # a hand move: aliases as `promote` leaves them
    return deliver_task(params)


@flow(name="trade")
def trade_session(params: Params | None = None) -> CycleResult:
    """One trading cycle of the champion on the latest bar, on the session's schedule."""
    return deliver_task(params or load_params())
