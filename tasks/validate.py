"""Stage 2, validate: a Great Expectations 1.x suite over the raw bars.

Rows that fail a row-level expectation go to ``data/quarantine/<file>.parquet`` with a
``reason`` column; the rest go to ``data/validated/bars.parquet``. Rows in = rows out +
rows quarantined, and ``data/raw/`` is never modified. If more than
``validation.max_bad_fraction`` of the rows fail, the stage stops with one line naming
each offending file and its count.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.bars import PRICE_COLUMNS, read_parquet, to_contract, write_parquet
from tasks.config import Params
from tasks.errors import DataError, MissingInput, ValidationFailed
from tasks.storage import atomic_dir

log = logging.getLogger("podracer.validate")
VALIDATED = "bars.parquet"
REPORT = "report.md"


@dataclass(frozen=True)
class ValidateResult:
    rows_in: int
    rows_out: int
    quarantined: int
    path: Path
    report: Path


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


def row_failures(bars: pd.DataFrame) -> pd.Series:
    """Reasons each row fails the suite, ``"; "``-joined, indexed like ``bars`` (only failing rows)."""
    import great_expectations as gx

    # GX sets INFO on this logger and announces a temporary docs folder on every context.
    logging.getLogger("great_expectations.data_context.types.base").setLevel(logging.WARNING)
    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = {"globally": False}  # type: ignore[assignment]
    asset = context.data_sources.add_pandas("bars").add_dataframe_asset(name="bars")
    batch_def = asset.add_batch_definition_whole_dataframe("all")
    suite = context.suites.add(gx.ExpectationSuite(name="ohlcv"))
    # GX does not return results in suite order: key each reason by its expectation's id.
    reason_of = {suite.add_expectation(expectation).id: reason for reason, expectation in _suite()}
    frame = bars.reset_index(drop=True)
    batch = batch_def.get_batch(batch_parameters={"dataframe": frame})
    result = batch.validate(suite, result_format={"result_format": "COMPLETE"})
    reasons: dict[int, list[str]] = {}
    for outcome in result.results:
        reason = reason_of[outcome.expectation_config.id]
        if outcome.exception_info.get("raised_exception"):
            raise DataError(f"validation: expectation '{reason}' could not run")
        for idx in outcome.result.get("unexpected_index_list") or []:
            reasons.setdefault(int(idx), []).append(reason)
    return pd.Series({i: "; ".join(r) for i, r in sorted(reasons.items())}, dtype=object)


def _load_raw(raw: Path) -> pd.DataFrame:
    files = sorted(raw.glob("*.parquet"))
    if not files:
        raise MissingInput(f"{raw}: no Parquet files (run `podracer ingest` first)")
    frames = []
    for path in files:
        frame, _ = read_parquet(path)
        frame = to_contract(frame, str(path))
        frame["_file"] = str(path)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def _reasons(group: pd.DataFrame) -> list[str]:
    return sorted({r for joined in group["reason"] for r in joined.split("; ")})


def _write_report(path: Path, rows_in: int, bad: pd.DataFrame) -> None:
    lines = [
        "# Validation report",
        "",
        f"- rows in: {rows_in}",
        f"- rows quarantined: {len(bad)}",
        f"- rows out: {rows_in - len(bad)}",
        "",
    ]
    if len(bad):
        lines += ["| file | rows | reasons |", "|---|---|---|"]
        for name, group in bad.groupby("_file"):
            lines.append(f"| {name} | {len(group)} | {', '.join(_reasons(group))} |")
    path.write_text("\n".join(lines) + "\n")


def validate(params: Params) -> ValidateResult:
    """Validate ``data/raw/``; write ``data/validated/`` and ``data/quarantine/``."""
    dirs = params.dirs
    bars = _load_raw(dirs.raw)
    reasons = row_failures(bars.drop(columns="_file"))
    bad = bars.loc[reasons.index].assign(reason=reasons.values)
    good = bars.drop(index=reasons.index).drop(columns="_file")

    with atomic_dir(dirs.quarantine) as staging:
        for name, group in bad.groupby("_file"):
            target = staging / Path(str(name)).name
            write_parquet(group.drop(columns="_file").reset_index(drop=True), target, params.data.freq)
        _write_report(staging / REPORT, len(bars), bad)
    report = dirs.quarantine / REPORT

    out = dirs.validated / VALIDATED
    fraction = len(bad) / max(len(bars), 1)
    if fraction > params.validation.max_bad_fraction:
        out.unlink(missing_ok=True)  # downstream must not read a stale validated set
        per_file = "; ".join(
            f"{name}: {len(g)} ({', '.join(_reasons(g))})"
            for name, g in bad.groupby("_file")
        )
        raise ValidationFailed(
            f"validation failed: {len(bad)} of {len(bars)} rows bad in {per_file}; "
            f"quarantined in {dirs.quarantine}/"
        )
    write_parquet(good.reset_index(drop=True), out, params.data.freq)
    log.info("validated %d rows, quarantined %d", len(good), len(bad))
    return ValidateResult(len(bars), len(good), len(bad), out, report)


validate_task = task(validate, name="validate", cache_policy=NO_CACHE)
