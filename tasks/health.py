"""The one health check every service is judged by (docs/operations.md).

A service is up when a plain ``GET`` of its health URL answers 200 within ``timeout``
seconds: Prefect's ``/api/health``, MLflow's ``/health``, the webhook receiver's
``/health`` and the paper broker's ``/v2/clock`` (which needs its API keys as headers).
Anything else (refused, timed out, another status) is "does not answer".
"""

from __future__ import annotations

from collections.abc import Mapping

import requests


def answers(url: str, headers: Mapping[str, str] | None = None, timeout: float = 2.0) -> bool:
    """Does ``url`` answer a ``GET`` with 200 within ``timeout`` seconds?"""
    try:
        return requests.get(url, headers=dict(headers or {}), timeout=timeout).status_code == 200
    except requests.RequestException:
        return False
