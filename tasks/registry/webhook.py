"""The bridge from MLflow's model-registry webhooks to Prefect events (docs/operations.md).

Prefect OSS has no webhooks, so a small FastAPI receiver takes MLflow's signed
``model_version_alias.created`` deliveries, checks them, and turns "alias champion moved
to version v" into one Prefect event (:data:`PROMOTED`) that a deployment trigger picks up.
MLflow delivers fire-and-forget (3 retries, then the event is lost), so a :class:`Poller`
compares the registry's champion with what was last delivered (:func:`undelivered`) and
emits the same event when a webhook went missing. The runner's other poll, on data, uses
the same class (``flows/deployments.py``).

Checked against MLflow 3.17.2's own source (``mlflow/webhooks/delivery.py``,
``constants.py``, ``types.py`` and ``mlflow/server/handlers.py`` in the installed package):

- headers ``X-MLflow-Delivery-Id`` (a uuid4), ``X-MLflow-Timestamp`` (``str(int(time.time()))``)
  and, only when the webhook has a secret, ``X-MLflow-Signature``;
- body ``json.dumps({"entity", "action", "timestamp" (ISO), "data"})``, plus ``"workspace"``
  when workspaces are on; for an alias ``data`` is ``{"name", "alias", "version"}`` (strings);
- ``test_webhook`` sends the same shape, signed the same way, with the event's example
  payload: ``{"name": "example_model", "alias": "example_alias", "version": "1"}``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import fastapi
from fastapi.responses import JSONResponse

log = logging.getLogger("podracer.webhook")

PROMOTED = "podracer.model.promoted"
"""The Prefect event emitted when a model's ``champion`` alias points at a new version."""
CHAMPION = "champion"
DELIVERY_ID_HEADER = "X-MLflow-Delivery-Id"
TIMESTAMP_HEADER = "X-MLflow-Timestamp"
SIGNATURE_HEADER = "X-MLflow-Signature"
TEST_PING_MODEL = "example_model"
"""The model name in MLflow's example payloads, which ``test_webhook`` sends."""


def sign(secret: str, delivery_id: str, timestamp: str, body: bytes) -> str:
    """MLflow's webhook signature of one delivery: ``"v1," + base64(HMAC-SHA256)``.

    Matches ``mlflow.webhooks.delivery._generate_hmac_signature`` in 3.17.2: the key is
    ``secret`` as UTF-8, the message ``f"{delivery_id}.{timestamp}.{payload_json}"`` as
    UTF-8 (MLflow signs the same JSON string it sends as the body), the digest standard
    base64 with padding. Raises ``UnicodeDecodeError`` if ``body`` is not UTF-8.
    """
    message = f"{delivery_id}.{timestamp}.{body.decode('utf-8')}".encode()
    digest = hmac.new(secret.encode("utf-8"), message, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def verify(secret: str, headers: Mapping[str, str], body: bytes, now: float, tolerance_s: float = 300) -> str | None:
    """None if the delivery is genuine and fresh, else a one-line reason to refuse it.

    A timestamp more than ``tolerance_s`` from ``now`` (unix seconds), past or future, is
    refused so that a captured delivery cannot be replayed later. Header names are matched
    case-insensitively (HTTP semantics); the signature is compared in constant time.
    """
    lower = {k.lower(): v for k, v in headers.items()}
    values = {}
    for name in (DELIVERY_ID_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER):
        if not lower.get(name.lower()):
            return f"missing {name} header"
        values[name] = lower[name.lower()]
    stamp = values[TIMESTAMP_HEADER]
    try:
        age = now - int(stamp)
    except ValueError:
        return f"bad timestamp: {stamp[:40]!r} is not unix seconds"
    if age > tolerance_s:
        return f"stale timestamp: {age:.0f} s old (limit {tolerance_s:.0f} s)"
    if -age > tolerance_s:
        return f"future timestamp: {-age:.0f} s ahead (limit {tolerance_s:.0f} s)"
    try:
        expected = sign(secret, values[DELIVERY_ID_HEADER], stamp, body)
    except UnicodeDecodeError:
        return "bad body: not UTF-8"
    if not hmac.compare_digest(expected.encode(), values[SIGNATURE_HEADER].encode()):
        return "bad signature"
    return None


def promotion_event(name: str, version: str, delivery_id: str, via: str) -> dict[str, Any]:
    """The :data:`PROMOTED` event for ``name@champion -> version``, as ``emit_event`` kwargs.

    ``via`` says who noticed ("webhook" or "poll"); ``delivery_id`` lets a run be traced
    back to the MLflow delivery (or poll) that started it.
    """
    return {
        "event": PROMOTED,
        "resource": {"prefect.resource.id": f"podracer.model.{name}", "prefect.resource.name": name},
        "payload": {"name": name, "alias": CHAMPION, "version": version, "delivery_id": delivery_id, "via": via},
    }


def polled_promotion(name: str, version: str, delivered: str | None) -> dict[str, Any]:
    """The :data:`PROMOTED` event the poll emits for a champion no delivery has traded with."""
    return promotion_event(name, version, f"poll-{version}-{int(time.time())}", "poll")


def undelivered(champion: str | None, delivered: str | None) -> tuple[str, str | None] | None:
    """``(champion, delivered)`` while the champion has not traded yet (``delivered`` is the
    version the last delivery traded with, None before any); None when there is no champion."""
    if champion is None or (delivered is not None and str(champion) == str(delivered)):
        return None
    return str(champion), None if delivered is None else str(delivered)


def prefect_emit(event: Mapping[str, Any]) -> None:
    """Send one :func:`promotion_event` to Prefect (imported lazily: the import is slow)."""
    from prefect.events import emit_event

    emit_event(event=event["event"], resource=event["resource"], payload=event["payload"])


def _ignored(reason: str) -> JSONResponse:
    return JSONResponse({"emitted": False, "reason": reason}, status_code=200)


def receiver_app(
    secret: str, model_name: str, emit: Callable[[dict[str, Any]], None], tolerance_s: float = 300
) -> fastapi.FastAPI:
    """The receiver MLflow's webhook posts to: ``GET /health`` and ``POST /webhook``.

    ``/webhook`` answers 401 to an unsigned, forged or stale delivery and 400 to a body that
    is not a JSON object; 202 when it emitted (only ``model_version_alias.created`` with
    alias ``champion`` on ``model_name``); 200 with a reason for every other genuine
    delivery, MLflow's test ping included (so ``test_webhook`` reports success); 503 when
    ``emit`` failed, which MLflow retries.
    """
    if not secret:
        raise ValueError("receiver_app needs a non-empty secret: an unsigned webhook could start any run")
    app = fastapi.FastAPI(title="podracer MLflow webhook receiver")

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/webhook")
    async def webhook(request: fastapi.Request) -> JSONResponse:
        body = await request.body()
        reason = verify(secret, request.headers, body, time.time(), tolerance_s)
        if reason is not None:
            log.warning("webhook refused: %s", reason)
            return JSONResponse({"detail": reason}, status_code=401)
        try:
            message = json.loads(body)
        except ValueError as exc:
            return JSONResponse({"detail": f"body is not JSON: {exc}"}, status_code=400)
        if not isinstance(message, dict) or not isinstance(message.get("data"), dict):
            return JSONResponse({"detail": "body is not an MLflow webhook payload"}, status_code=400)
        data = message["data"]
        kind = f"{message.get('entity')}.{message.get('action')}"
        if data.get("name") == TEST_PING_MODEL and model_name != TEST_PING_MODEL:
            return _ignored(f"MLflow test ping ({kind})")
        if kind != "model_version_alias.created":
            return _ignored(f"event {kind} is not model_version_alias.created")
        if data.get("name") != model_name:
            return _ignored(f"model {data.get('name')!r} is not {model_name!r}")
        if data.get("alias") != CHAMPION:
            return _ignored(f"alias {data.get('alias')!r} is not {CHAMPION!r}")
        version = data.get("version")
        if version in (None, ""):
            return _ignored("payload has no version")
        delivery_id = request.headers[DELIVERY_ID_HEADER]
        try:
            emit(promotion_event(model_name, str(version), delivery_id, "webhook"))
        except Exception as exc:  # noqa: BLE001 - any emit failure: MLflow retries a 503
            log.warning("emit failed for %s v%s (delivery %s): %s", model_name, version, delivery_id, exc)
            return JSONResponse({"detail": f"emit failed: {exc}"}, status_code=503)
        log.info("emitted %s for %s v%s (delivery %s)", PROMOTED, model_name, version, delivery_id)
        return JSONResponse({"emitted": True, "version": str(version)}, status_code=202)

    return app


MAX_WAITS = 32
"""The longest wait between two emissions for one mismatch, in poll intervals."""


class Poller:
    """Emits an event again when what should have followed a change has not.

    ``lag()`` returns ``(wanted, done)`` while the two differ and None once they agree: the
    registry's champion against the version last delivered (:func:`undelivered`), or the data
    version in ``data/raw/`` against the one the last continuous-training cycle finished on
    (``tasks/data/arrivals.py``). ``busy()`` says the difference is being worked on (a cycle
    queued or running). ``event(wanted, done)`` builds the event that asks for it again and
    ``emit`` sends it.

    A mismatch is first only noted, because the normal path (the webhook's delivery, the
    arrival event's cycle) lands within seconds, and its wait starts anew while ``busy()``.
    Once the same mismatch (the same ``wanted`` *and* ``done``) has lasted ``interval_s``
    with nothing under way the event is emitted, and emitted again while the mismatch lasts,
    each wait twice the one before (at most :data:`MAX_WAITS` intervals): a cycle that fails
    every time is retried ever less often. ``clock`` measures those waits (injectable so
    tests need no sleeping).
    """

    def __init__(
        self,
        what: str,
        lag: Callable[[], tuple[str, str | None] | None],
        event: Callable[[str, str | None], dict[str, Any]],
        emit: Callable[[dict[str, Any]], None],
        interval_s: float,
        busy: Callable[[], bool] = lambda: False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what, self.lag, self.event, self.emit = what, lag, event, emit
        self.interval_s, self.busy, self.clock = interval_s, busy, clock
        self._pending: tuple[str, str | None] | None = None  # the mismatch in view
        self._since = 0.0  # when that mismatch was first seen, last worked on, or last emitted for
        self._waits = 1  # intervals to wait before the next emission for it

    def tick(self) -> str | None:
        """One poll: the ``wanted`` it emitted for, or None (also when a read failed)."""
        try:
            seen = self.lag()
            busy = seen is not None and self.busy()
        except Exception as exc:  # noqa: BLE001 - MLflow or Prefect down, file unreadable: try again next tick
            log.warning("poll of %s failed: %s: %s", self.what, type(exc).__name__, exc)
            return None
        now = self.clock()
        if seen != self._pending:  # caught up, or a new mismatch (perhaps moved twice between polls): wait anew
            self._pending, self._since, self._waits = seen, now, 1
            return None
        if seen is None:
            return None
        if busy:  # being worked on: the wait starts when the work stops
            self._since = now
            return None
        if now - self._since < self.interval_s * self._waits:
            return None
        wanted, done = seen
        message = self.event(wanted, done)
        self.emit(message)
        self._since, self._waits = now, min(2 * self._waits, MAX_WAITS)
        log.info("poll of %s emitted %s for %s (done: %s)", self.what, message["event"], wanted, done)
        return wanted

    def run(self, stop: threading.Event) -> None:
        """Tick every ``interval_s`` until ``stop`` is set; a failing tick is logged, never fatal."""
        while not stop.is_set():
            try:
                self.tick()
            except Exception as exc:  # noqa: BLE001 - e.g. emit failed: the next tick retries
                log.warning("poll tick of %s failed: %s: %s", self.what, type(exc).__name__, exc)
            stop.wait(self.interval_s)


ALIAS_CREATED = "model_version_alias.created"
"""The MLflow webhook event that moves an alias: the one the receiver turns into a Prefect event."""
