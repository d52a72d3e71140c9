"""The continuous-training cycle's own record: the data version it last finished on
(``data/ct/state.json``), and the one line that ends a cycle early when nothing is new
(docs/operations.md, the CT cycle).

The record is written last, atomically, once a cycle has registered its model: a cycle cut
off before that leaves the previous record, and the next cycle takes the same data as new.

It lives in ``model/`` beside the cycle's walk forward (:mod:`tasks.model.walkforward`), the
other plain functions only the CT cycle runs, whose challenger is written under the same
``data/ct/``: ``flows/`` stays wiring (``flows/ct_cycle.py`` and the runner's data poll in
``flows/deployments.py`` read it), and the data part only produces data versions. It reads
ingest's result, a lower part (docs/design.md, The tree).
"""

from __future__ import annotations

import json

from tasks.config import Params
from tasks.data.bars import read_parquet
from tasks.data.ingest import IngestResult
from tasks.storage import write_atomic

STATE = "state.json"
"""The continuous-training cycle's record, under ``data/ct/``: the data version it last finished on."""


def last_processed(params: Params) -> str | None:
    """The data version the last continuous-training cycle finished on (``data/ct/state.json``)."""
    path = params.dirs.ct / STATE
    return json.loads(path.read_text()).get("data_version") if path.exists() else None


def record_processed(params: Params, data_version: str, outcome: dict[str, object]) -> None:
    """Remember the data version a cycle finished on, with its outcome (written last, atomically)."""
    write_atomic(params.dirs.ct / STATE, json.dumps({"data_version": data_version, **outcome}, indent=1))


def nothing_new(params: Params, ingested: IngestResult, champion_data_version: str | None) -> str | None:
    """The one line that ends a cycle early, or None when there are new bars: nothing is new
    when the data version is the one the last cycle (or, before any cycle, the champion) was
    trained on (docs/operations.md, the CT cycle)."""
    version = ingested.data_version
    if version != (last_processed(params) or champion_data_version):
        return None
    last = str(read_parquet(min(ingested.files))[0]["ts"].max())[:10] if ingested.files else "-"
    return f"nothing new since data version {version[:8]} (last bar {last}): the cycle ends here"
