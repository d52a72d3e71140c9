"""How the trading client names a bar: by its date (daily bars) or by its minute (minute bars).

The name keys the journal's records, goes into the client order ids and the logs, and tells
which bars a version already traded. Daily bars keep their date, ``2023-10-25`` (ids
``pdr-v3-20231025-SYM``); a minute bar is named by its start in UTC, ``2023-10-25T13:30Z``
(ids ``pdr-v3-202310251330-SYM``), so two bars of one session never share a name
(docs/delivery.md, The trading loop). Names of one frequency sort as their bars do.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

MINUTE = pd.Timedelta(minutes=1)


def bar_key(stamp: Any, freq: str) -> str:
    """The name of the bar starting at ``stamp`` (a UTC ``datetime64`` of the feature set)."""
    if freq == "1d":
        return str(stamp)[:10]
    return f"{np.datetime_as_string(np.datetime64(stamp, 'm'))}Z"


def bar_time(key: str) -> np.datetime64:
    """The bar's start (UTC, nanoseconds, zone-less as the feature set's timestamps)."""
    return np.datetime64(key.removesuffix("Z"), "ns")


def compact(key: str) -> str:
    """The name's digits, as client order ids carry it: ``20231025`` or ``202310251330``."""
    return "".join(c for c in key if c.isdigit())


def bar_step(key: str) -> int:
    """The bar's MLflow step: days since 1970 for daily bars (as before minute bars), minutes for minute bars."""
    unit = "m" if "T" in key else "D"
    return int(np.datetime64(key.removesuffix("Z"), unit).astype(np.int64))


def bar_close(key: str, freq: str) -> pd.Timestamp | None:
    """When a minute bar closes (UTC); None for a daily bar, whose close is its session's."""
    return None if freq == "1d" else pd.Timestamp(bar_time(key), tz="UTC") + MINUTE
