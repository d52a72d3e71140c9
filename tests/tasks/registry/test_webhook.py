"""The MLflow-webhook-to-Prefect bridge: signature and receiver (the fallback poll: test_webhook_poll.py)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
import warnings
from typing import Any

import pytest

with warnings.catch_warnings():  # starlette 1.10 nudges towards httpx2; httpx 0.28 is what is pinned
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

from tasks.registry import webhook
from tasks.registry.webhook import (
    PROMOTED,
    promotion_event,
    receiver_app,
    sign,
    verify,
)

SECRET = "s3cret-key"
MODEL = "podracer-policy"


def alias_body(name: str = MODEL, alias: str = "champion", version: str = "3") -> bytes:
    """The body MLflow 3.17.2 sends for ``model_version_alias.created`` (json.dumps of it)."""
    return json.dumps({
        "entity": "model_version_alias", "action": "created", "timestamp": "2026-01-01T00:00:00+00:00",
        "data": {"name": name, "alias": alias, "version": version},
    }).encode()


def signed_headers(body: bytes, ts: int | None = None, secret: str = SECRET, delivery: str = "d-42") -> dict[str, str]:
    stamp = str(int(time.time()) if ts is None else ts)
    return {
        "Content-Type": "application/json", "X-MLflow-Delivery-Id": delivery,
        "X-MLflow-Timestamp": stamp, "X-MLflow-Signature": sign(secret, delivery, stamp, body),
    }


@pytest.fixture
def receiver() -> tuple[TestClient, list[dict[str, Any]]]:
    emitted: list[dict[str, Any]] = []
    return TestClient(receiver_app(SECRET, MODEL, emitted.append)), emitted


# --- signature --------------------------------------------------------------------------------


def test_sign_matches_an_independent_hmac_and_a_hand_checked_vector() -> None:
    body = b'{"a": 1}'
    mac = hmac.new(b"shh", b'd-1.1700000000.{"a": 1}', hashlib.sha256).digest()
    assert sign("shh", "d-1", "1700000000", body) == "v1," + base64.b64encode(mac).decode()
    # Computed once and checked with `openssl dgst -sha256 -hmac shh -binary | base64`.
    assert sign("shh", "d-1", "1700000000", body) == "v1,2SFcg9u0FYaFjjGrm9dQlItBqd4c4Q1g6mxLnKV1HtE="
    assert sign("shh", "d-2", "1700000000", body) != sign("shh", "d-1", "1700000000", body)
    assert sign("shh", "d-1", "1700000001", body) != sign("shh", "d-1", "1700000000", body)


def test_sign_equals_mlflows_own_signature() -> None:
    from mlflow.webhooks.delivery import _generate_hmac_signature

    payload = alias_body().decode()
    assert sign(SECRET, "d-9", "1700000000", payload.encode()) == _generate_hmac_signature(
        SECRET, "d-9", "1700000000", payload
    )


def test_verify_reasons() -> None:
    body, now = alias_body(), 1_700_000_000.0
    good = signed_headers(body, ts=int(now))
    assert verify(SECRET, good, body, now) is None
    assert verify(SECRET, {k.lower(): v for k, v in good.items()}, body, now) is None
    assert verify(SECRET, good, body, now + 412) == "stale timestamp: 412 s old (limit 300 s)"
    assert verify(SECRET, good, body, now - 400).startswith("future timestamp")
    assert verify(SECRET, good, body, now + 300) is None
    assert verify("other", good, body, now) == "bad signature"
    assert verify(SECRET, good, body + b" ", now) == "bad signature"
    for name in ("X-MLflow-Delivery-Id", "X-MLflow-Timestamp", "X-MLflow-Signature"):
        partial = {k: v for k, v in good.items() if k != name}
        assert verify(SECRET, partial, body, now) == f"missing {name} header"
    assert verify(SECRET, {**good, "X-MLflow-Timestamp": "soon"}, body, now).startswith("bad timestamp")
    # The timestamp is signed: moving it to look fresh breaks the signature.
    assert verify(SECRET, {**good, "X-MLflow-Timestamp": str(int(now) + 5)}, body, now) == "bad signature"


def test_a_signature_wrong_only_in_its_last_character_is_refused(receiver: tuple[TestClient, list]) -> None:
    """The whole signature is compared, not a prefix of it."""
    client, emitted = receiver
    body, now = alias_body(), int(time.time())
    headers = signed_headers(body, ts=now)
    good = headers["X-MLflow-Signature"]
    forged = good[:-1] + ("A" if good[-1] != "A" else "B")
    assert len(forged) == len(good) and forged[:-1] == good[:-1] and forged != good
    assert verify(SECRET, headers, body, now) is None
    assert verify(SECRET, {**headers, "X-MLflow-Signature": forged}, body, now) == "bad signature"
    assert verify(SECRET, {**headers, "X-MLflow-Signature": good[:-1]}, body, now) == "bad signature"
    response = client.post("/webhook", content=body, headers={**headers, "X-MLflow-Signature": forged})
    assert (response.status_code, response.json()) == (401, {"detail": "bad signature"})
    assert emitted == []


def test_a_body_changed_by_one_byte_after_signing_is_refused(receiver: tuple[TestClient, list]) -> None:
    """The signature covers the body: one byte changed (here the version to promote) breaks it."""
    client, emitted = receiver
    signed, tampered, now = alias_body(version="3"), alias_body(version="4"), int(time.time())
    assert len(signed) == len(tampered) and sum(a != b for a, b in zip(signed, tampered)) == 1
    headers = signed_headers(signed, ts=now)
    assert verify(SECRET, headers, signed, now) is None
    assert verify(SECRET, headers, tampered, now) == "bad signature"
    response = client.post("/webhook", content=tampered, headers=headers)
    assert (response.status_code, response.json()) == (401, {"detail": "bad signature"})
    assert emitted == []


# --- receiver ---------------------------------------------------------------------------------


def test_health(receiver: tuple[TestClient, list]) -> None:
    client, _ = receiver
    response = client.get("/health")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


def test_good_signature_emits_one_promotion(receiver: tuple[TestClient, list]) -> None:
    client, emitted = receiver
    body = alias_body(version="7")
    response = client.post("/webhook", content=body, headers=signed_headers(body, delivery="abc-123"))
    assert (response.status_code, response.json()) == (202, {"emitted": True, "version": "7"})
    assert emitted == [{
        "event": PROMOTED,
        "resource": {"prefect.resource.id": f"podracer.model.{MODEL}", "prefect.resource.name": MODEL},
        "payload": {"name": MODEL, "alias": "champion", "version": "7", "delivery_id": "abc-123", "via": "webhook"},
    }]


@pytest.mark.parametrize("case", ["bad_signature", "stale", "future", "no_signature", "no_timestamp", "no_id"])
def test_refused_deliveries_emit_nothing(receiver: tuple[TestClient, list], case: str) -> None:
    client, emitted = receiver
    body, now = alias_body(), int(time.time())
    headers = {
        "bad_signature": signed_headers(body, secret="wrong"),
        "stale": signed_headers(body, ts=now - 301),
        "future": signed_headers(body, ts=now + 301),
    }.get(case, signed_headers(body))
    missing = {"no_signature": "X-MLflow-Signature", "no_timestamp": "X-MLflow-Timestamp",
               "no_id": "X-MLflow-Delivery-Id"}
    headers.pop(missing.get(case, ""), None)
    response = client.post("/webhook", content=body, headers=headers)
    assert response.status_code == 401
    reason = response.json()["detail"]
    expected = {"bad_signature": "bad signature", "stale": "stale", "future": "future"}.get(case, "missing")
    assert reason.startswith(expected)
    assert emitted == []


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (alias_body(alias="challenger"), "alias 'challenger'"),
        (alias_body(name="someone-else"), "model 'someone-else'"),
        (json.dumps({"entity": "model_version", "action": "created", "data": {"name": MODEL, "version": "3"}}).encode(),
         "event model_version.created"),
        (json.dumps({"entity": "model_version_alias", "action": "deleted",
                     "data": {"name": MODEL, "alias": "champion"}}).encode(), "event model_version_alias.deleted"),
    ],
)
def test_other_genuine_events_are_acknowledged_without_emitting(
    receiver: tuple[TestClient, list], body: bytes, reason: str
) -> None:
    client, emitted = receiver
    response = client.post("/webhook", content=body, headers=signed_headers(body))
    assert response.status_code == 200
    assert response.json()["emitted"] is False
    assert response.json()["reason"].startswith(reason)
    assert emitted == []


@pytest.mark.parametrize("body", [b"{not json", b"[1, 2]", b'{"entity": "x"}'])
def test_signed_but_malformed_body_is_400(receiver: tuple[TestClient, list], body: bytes) -> None:
    client, emitted = receiver
    response = client.post("/webhook", content=body, headers=signed_headers(body))
    assert response.status_code == 400
    assert emitted == []


def test_emit_failure_answers_503_so_mlflow_retries() -> None:
    def broken(event: dict[str, Any]) -> None:
        raise ConnectionError("prefect is down")

    client = TestClient(receiver_app(SECRET, MODEL, broken))
    body = alias_body()
    assert client.post("/webhook", content=body, headers=signed_headers(body)).status_code == 503


def test_empty_secret_is_refused() -> None:
    with pytest.raises(ValueError, match="secret"):
        receiver_app("", MODEL, lambda event: None)


class _SessionToTestClient:
    """Stands in for MLflow's ``requests`` session: forwards its POST to the TestClient."""

    def __init__(self, client: TestClient) -> None:
        self.client = client

    def post(self, url: str, data: bytes, headers: dict[str, str], timeout: float) -> Any:
        return self.client.post("/webhook", content=data, headers=headers)


def _mlflow_webhook(event: Any) -> Any:
    from mlflow.entities.webhook import Webhook

    return Webhook(webhook_id="w1", name="bridge", url="http://127.0.0.1:9/webhook", events=[event],
                   creation_timestamp=0, last_updated_timestamp=0, secret=SECRET)


def test_mlflows_own_delivery_and_test_ping_are_understood(
    receiver: tuple[TestClient, list], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The exact request MLflow 3.17.2 builds (headers, body, signature) reaches the receiver."""
    from mlflow.entities.webhook import WebhookAction, WebhookEntity, WebhookEvent
    from mlflow.webhooks import delivery
    from mlflow.webhooks.types import ModelVersionAliasCreatedPayload

    client, emitted = receiver
    session = _SessionToTestClient(client)
    monkeypatch.setattr(delivery, "_validate_webhook_url", lambda url: None)
    monkeypatch.setattr(delivery, "_get_or_create_webhook_session", lambda: session)
    event = WebhookEvent(WebhookEntity.MODEL_VERSION_ALIAS, WebhookAction.CREATED)
    hook = _mlflow_webhook(event)

    result = delivery.test_webhook(hook)  # what `create_webhook` users run to check the URL
    assert result.success and result.response_status == 200, result
    ping = "MLflow test ping (model_version_alias.created)"
    assert json.loads(result.response_body) == {"emitted": False, "reason": ping}
    assert emitted == []

    payload = ModelVersionAliasCreatedPayload(name=MODEL, alias="champion", version="5")
    response = delivery._send_webhook_request(hook, payload, event, session)
    assert response.status_code == 202
    assert [e["payload"]["version"] for e in emitted] == ["5"]
    uuid.UUID(emitted[0]["payload"]["delivery_id"])  # MLflow's delivery id went through


def test_prefect_emit_passes_the_event_through(monkeypatch: pytest.MonkeyPatch) -> None:
    import prefect.events

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(prefect.events, "emit_event", lambda **kwargs: calls.append(kwargs))
    event = promotion_event(MODEL, "2", "d-1", "poll")
    webhook.prefect_emit(event)
    assert calls == [event]
