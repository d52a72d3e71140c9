"""The MLflow webhook that ``podracer up`` registers once its services answer (docs/operations.md,
The services): alias moves on the local tracking server are posted, signed, to the local
receiver, which turns them into Prefect events (:mod:`tasks.registry.webhook`).

It lives with the services, not in the registry part: it needs their addresses and the
webhook secret they share (:mod:`deploy.local.services`), and a stage never imports ``deploy``.
"""

from __future__ import annotations

from deploy.local.services import mlflow_url, receiver_url, webhook_secret
from tasks.config import Params
from tasks.registry.webhook import ALIAS_CREATED

WEBHOOK_NAME = "podracer-champion"


def ensure_webhook(params: Params) -> str:
    """The MLflow webhook that posts alias moves to the receiver of ``podracer up``, made or
    updated once (the server caches its webhook list for 60 s, so the first alias move after a
    fresh ``up`` may be delivered by the registry poll instead)."""
    from mlflow import MlflowClient
    from mlflow.entities.webhook import WebhookEvent

    store = MlflowClient(mlflow_url(params), mlflow_url(params))
    url, event = f"{receiver_url(params)}/webhook", WebhookEvent.from_str(ALIAS_CREATED)
    for hook in store.list_webhooks():
        if hook.name == WEBHOOK_NAME:
            if hook.url != url:
                store.update_webhook(hook.webhook_id, url=url, secret=webhook_secret(params))
            return hook.webhook_id
    return store.create_webhook(WEBHOOK_NAME, url, [event], description="champion alias moves -> Prefect event",
                                secret=webhook_secret(params)).webhook_id
