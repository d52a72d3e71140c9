"""The Great Expectations 1.x suite of the OHLCV row rules (docs/data.md, validation).

Validation runs it on every row, one batch of whole symbols at a time. A batch is first
checked pass/fail only (GX's ``BOOLEAN_ONLY`` result, about half the cost of listing the
failing rows); only a batch that fails is run again for the rows each rule names. Clean data,
the usual case, pays the cheap pass. ``symbol`` goes to GX as a categorical: the
duplicate rule hashes (symbol, ts), and codes hash faster than strings.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

from tasks.data.bars import COLUMNS, PRICE_COLUMNS
from tasks.errors import DataError

GX_CHUNK_ROWS = 1_000_000
"""GX validates whole symbols in chunks of about this many rows, to bound its memory."""


def _suite() -> list[tuple[str, Any]]:
    """(reason, expectation) pairs of the OHLCV suite; GX is imported lazily (~4 s)."""
    import great_expectations as gx

    e = gx.expectations
    pairs: list[tuple[str, Any]] = [
        (f"null {c}", e.ExpectColumnValuesToNotBeNull(column=c))
        for c in ("symbol", "ts", *PRICE_COLUMNS, "volume")
    ]
    pairs += [
        (f"{c} <= 0", e.ExpectColumnValuesToBeBetween(column=c, min_value=0, strict_min=True))
        for c in PRICE_COLUMNS
    ]
    pairs += [
        ("high < open", e.ExpectColumnPairValuesAToBeGreaterThanB(column_A="high", column_B="open", or_equal=True)),
        ("high < close", e.ExpectColumnPairValuesAToBeGreaterThanB(column_A="high", column_B="close", or_equal=True)),
        ("high < low", e.ExpectColumnPairValuesAToBeGreaterThanB(column_A="high", column_B="low", or_equal=True)),
        ("low > open", e.ExpectColumnPairValuesAToBeGreaterThanB(column_A="open", column_B="low", or_equal=True)),
        ("low > close", e.ExpectColumnPairValuesAToBeGreaterThanB(column_A="close", column_B="low", or_equal=True)),
        ("volume < 0", e.ExpectColumnValuesToBeBetween(column="volume", min_value=0)),
        ("duplicate (symbol, ts)", e.ExpectCompoundColumnsToBeUnique(column_list=["symbol", "ts"])),
    ]
    return pairs


def symbol_chunks(symbols: pd.Series, max_rows: int = GX_CHUNK_ROWS) -> Iterator[np.ndarray]:
    """Row positions in chunks of whole symbols (so duplicates stay inside one chunk)."""
    chunk: list[np.ndarray] = []
    size = 0
    for positions in symbols.groupby(symbols, sort=True).indices.values():
        if chunk and size + len(positions) > max_rows:
            yield np.concatenate(chunk)
            chunk, size = [], 0
        chunk.append(positions)
        size += len(positions)
    if chunk:
        yield np.concatenate(chunk)


class Suite:
    """One GX context and suite, run on as many batches as validation has."""

    def __init__(self) -> None:
        import great_expectations as gx

        # GX sets INFO on this logger and announces a temporary docs folder on every context.
        logging.getLogger("great_expectations.data_context.types.base").setLevel(logging.WARNING)
        context = gx.get_context(mode="ephemeral")
        context.variables.progress_bars = {"globally": False}  # type: ignore[assignment]
        asset = context.data_sources.add_pandas("bars").add_dataframe_asset(name="bars")
        self._batches = asset.add_batch_definition_whole_dataframe("all")
        self._suite = context.suites.add(gx.ExpectationSuite(name="ohlcv"))
        # GX does not return results in suite order: key each reason by its expectation's id.
        self._reason_of = {self._suite.add_expectation(exp).id: reason for reason, exp in _suite()}

    def _run(self, frame: pd.DataFrame, result_format: str) -> list[Any]:
        batch = self._batches.get_batch(batch_parameters={"dataframe": frame})
        outcomes = batch.validate(self._suite, result_format={"result_format": result_format}).results
        for outcome in outcomes:
            if outcome.exception_info.get("raised_exception"):
                raise DataError(f"validation: expectation '{self._reason_of[outcome.expectation_config.id]}' "
                                "could not run")
        return list(outcomes)

    def failures(self, bars: pd.DataFrame) -> pd.Series:
        """Reasons each row fails the suite, ``"; "``-joined, indexed by row position (failing rows only)."""
        reasons: dict[int, list[str]] = {}
        # a batch that fits is one chunk as it stands (validation's batches hold whole symbols)
        whole = len(bars) <= GX_CHUNK_ROWS
        for positions in [np.arange(len(bars))] if whole else symbol_chunks(bars["symbol"].fillna("")):
            frame = bars[list(COLUMNS)].reset_index(drop=True) if whole else \
                bars.iloc[positions][list(COLUMNS)].reset_index(drop=True)
            frame["symbol"] = frame["symbol"].astype("category")
            if all(outcome.success for outcome in self._run(frame, "BOOLEAN_ONLY")):
                continue
            for outcome in self._run(frame, "COMPLETE"):
                reason = self._reason_of[outcome.expectation_config.id]
                for idx in outcome.result.get("unexpected_index_list") or []:
                    reasons.setdefault(int(positions[int(idx)]), []).append(reason)
        return pd.Series({i: "; ".join(r) for i, r in sorted(reasons.items())}, dtype=object)


def row_failures(bars: pd.DataFrame) -> pd.Series:
    """:meth:`Suite.failures` of a suite of its own (validation keeps one for all its batches)."""
    return Suite().failures(bars)
