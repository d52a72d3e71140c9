"""The shadow and the champion's watch as ``podracer status`` shows them: the shadow's version,
live record and paper equity; the champion's latest look (docs/operations.md, the watch).

The record is the CT cycle's, written as tags on the shadow's registry version
(``tasks/registry/shadow.py``; until a cycle has tested it, only ``shadow_since``); the
equity is its own paper account's, at a local broker that answers (docs/delivery.md,
Shadow accounts). It only reads, and imports neither the registry's gate nor Prefect, so
``podracer status`` stays quick.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import requests

from tasks.config import Params, RegistryParams
from tasks.delivery.keys import SHADOW, Keys, key_file, key_vars, load_keys
from tasks.errors import ConfigError
from tasks.health import answers
from tasks.registry.store import tracking_uri
from tasks.registry.tags import BARS, DIFF, DRIFT, P_VALUE, SAFE, SINCE, WATCH_ACTION, WATCH_LINE

if TYPE_CHECKING:
    from mlflow import MlflowClient



@dataclass(frozen=True)
class Standing:
    """A shadow version, its record's tags and its paper account's equity (None: no broker answered)."""

    version: str
    tags: Mapping[str, str]
    equity: float | None

    def line(self) -> str:
        """One line: version, record (or "no record yet") and paper equity."""
        since = f" (record after {self.tags[SINCE]})" if SINCE in self.tags else ""
        if BARS in self.tags:
            record = (f"{self.tags[BARS]} bars of record, Sharpe difference {_number(self.tags.get(DIFF), '+.2f')}, "
                      f"p {_number(self.tags.get(P_VALUE), '.3f')}")
        else:
            record = "no record yet"
        equity = "" if self.equity is None else f"; paper equity {self.equity:,.2f}"
        return f"shadow version {self.version}{since}: {record}{equity}"


def _number(text: str | None, spec: str) -> str:
    if text is None:
        return "?"
    try:
        return format(float(text), spec)
    except ValueError:
        return text


def _client(registry: RegistryParams) -> MlflowClient | None:
    """A client of the store, or None when it does not exist or does not answer (nothing is created)."""
    uri = tracking_uri(registry)
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).exists():
        return None
    if uri.startswith("http") and not answers(f"{uri}/health"):
        return None
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def registry_aliases(registry: RegistryParams) -> dict[str, str]:
    """The registered model's aliases (alias -> version); empty without a store or a model."""
    from mlflow.exceptions import MlflowException

    store = _client(registry)
    if store is None:
        return {}
    try:
        return {alias: str(v) for alias, v in store.get_registered_model(registry.model_name).aliases.items()}
    except MlflowException:
        return {}


def watch_lines(registry: RegistryParams, champion: str | None, previous: str | None = None) -> list[str]:
    """The champion's live watch as its version's tags hold it (its latest look and what the
    watch did), and the safe policy while no version trades; nothing without a store. While
    the champion is there because the watch rolled back to it, also the look that did it:
    the ``previous`` champion's last line, whose version carries the action."""
    store = _client(registry)
    if store is None:
        return []
    from mlflow.exceptions import MlflowException

    try:
        safe = store.get_registered_model(registry.model_name).tags.get(SAFE)
        tags = store.get_model_version(registry.model_name, champion).tags if champion else {}
        before = store.get_model_version(registry.model_name, previous).tags if champion and previous else {}
    except MlflowException:
        return []
    lines = [f"safe policy: {safe}"] if safe else []
    if champion:
        lines.append(tags.get(WATCH_LINE, f"champion version {champion}: not watched yet (no recorded trading cycle)"))
    if tags.get(WATCH_ACTION):
        lines.append(f"watch action: {tags[WATCH_ACTION]}")
    if before.get(WATCH_ACTION, "").startswith(f"rollback to version {champion} ") and before.get(WATCH_LINE):
        lines.append(f"rolled back by the watch: {before[WATCH_LINE]}")
    if tags.get(DRIFT):
        lines.append(("warning: " if "large shift" in tags[DRIFT] else "") + tags[DRIFT])
    return lines


def paper_equity(url: str, keys: Keys) -> float | None:
    """The equity of the account ``keys`` open at the broker ``url``, or None if it does not answer."""
    try:
        answer = requests.get(f"{url}/v2/account", headers=keys.headers(), timeout=2.0)
        return float(answer.json()["equity"]) if answer.status_code == 200 else None
    except (requests.RequestException, ValueError, KeyError, TypeError):
        return None


def shadow_standing(params: Params, version: str, broker_url: str) -> Standing:
    """The shadow ``version``'s record tags and, with the local broker's shadow keys (never
    created here), its paper equity at ``broker_url``."""
    store = _client(params.registry)
    tags = dict(store.get_model_version(params.registry.model_name, version).tags) if store else {}
    try:
        keys = load_keys(key_file(params, SHADOW), names=key_vars(SHADOW))
    except ConfigError:
        return Standing(version, tags, None)
    return Standing(version, tags, paper_equity(broker_url, keys))
