"""The gate task: a tested policy's evidence, the gate's decision on it, and the report that
says why (docs/operations.md, the gate).

The pipeline's test split faces buy-and-hold and, when one sits, the champion: backtested
beside the agent on the same bars, and when it had trained or selected on any of them, the
window is not clean and the agent can enter shadow at most. A continuous-training cycle's
arms (challenger, champion and buy-and-hold) are backtested on the same evaluation window
and its standing shadow's record beside them. The evidence (:mod:`tasks.registry.evidence`)
goes to the decision rule (:mod:`tasks.registry.decision`); the tables and the tearsheet
(:mod:`tasks.registry.report`) show why. Moving the aliases is left to the register stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tasks.config import Params
from tasks.data import feature_set
from tasks.errors import MissingInput
from tasks.model.backtest import BacktestResult, compare
from tasks.model.walkforward import CHALLENGER, Champion, Windows, day, seen_bars
from tasks.registry.decision import Decision, decide, decide_cycle
from tasks.registry.evidence import against, evidence_line, refused
from tasks.registry.report import Arm, gate_table, tearsheet
from tasks.registry.shadow import ARM, Shadow
from trainers.common.metrics import periods_per_year

CT_FOLDER, GATE_FILE, TEARSHEET_FILE = "report", "gate.md", "tearsheet.html"
"""The cycle's report folder under ``data/ct/``, and its two files."""
CHAMPION_FOLDER = "champion"
"""Under ``data/backtest/``: the pipeline's test window with the champion beside the agent."""

@dataclass(frozen=True)
class GateVerdict:
    """What the gate decided, why, and the report that shows it."""

    decision: Decision
    report_markdown: str
    """The version's description in the MLflow UI, whose first line is the verdict line (and a cycle's
    Prefect artifact)."""
    report_file: Path | None = None
    """``gate.md`` (a cycle's)."""
    tearsheet: Path | None = None
    """The quantstats HTML tearsheet (a cycle's)."""
    compared: BacktestResult | None = None
    """The pipeline's test window with the champion beside the agent and buy-and-hold, when
    a champion sits (``data/backtest/champion/``)."""

    @property
    def passed(self) -> bool:
        """The new model itself is promoted (only the pipeline's gate can say so)."""
        return self.decision.action == "promote"

    @property
    def reason(self) -> str:
        """The verdict in one line (:attr:`tasks.registry.decision.Decision.line`)."""
        return self.decision.line

    @property
    def files(self) -> tuple[Path, ...]:
        found = tuple(path for path in (self.report_file, self.tearsheet) if path is not None)
        return found + (self.compared.files if self.compared is not None else ())


def _arms(params: Params, tested: BacktestResult) -> list[Arm]:
    per_year = periods_per_year(params.data.freq)
    return [Arm.of(name, tested.curve[name], per_year, params.backtest.risk_free) for name in tested.curve.columns]


def split_windows(fs: feature_set.FeatureSet) -> Windows:
    """The pipeline's splits as :class:`tasks.model.walkforward.Windows`: it trains on the
    train split, selects on validation and is judged on test."""
    valid = fs.splits["validation"][1]
    return Windows(train=fs.window("train"), select=fs.window("validation"), eval=fs.window("test"),
                   cutoff=day(fs.timestamps[valid]), first=day(fs.timestamps[fs.splits["test"][0]]),
                   last=day(fs.timestamps[fs.splits["test"][1]]))


def pipeline_gate(params: Params, tested: BacktestResult, champion: Champion | None) -> GateVerdict:
    """The pipeline's gate on its test window: the agent against buy-and-hold and, when one
    sits, the ``champion``, backtested beside it on the same bars
    (:func:`tasks.model.backtest.compare`, into ``data/backtest/champion/``). A champion whose
    data cutoff reaches into the window has seen some of its bars: no clean window, so the
    agent can only enter shadow, and the line says why. A champion that cannot trade the
    window (other symbols or features) is a faulted test, so the agent is refused and can be
    promoted only by hand (docs/operations.md, the gate)."""
    registry, per_year, risk_free = params.registry, periods_per_year(params.data.freq), params.backtest.risk_free
    fs = feature_set.load(params.dirs.features)
    w = split_windows(fs)
    said = f"Test window {tested.start} to {tested.end}; trained and selected on data to {w.cutoff}."
    if champion is None:
        decision = decide(against(tested.curve, "agent", registry, per_year, risk_free))
        return GateVerdict(decision, f"{decision.line}\n\n{said}")
    try:
        compared = compare(params, {"agent": params.dirs.models, "champion": champion.folder}, w.eval,
                           params.dirs.backtest / CHAMPION_FOLDER, f"Test window beside champion v{champion.version}")
    except MissingInput as err:  # it trades other symbols or features: no test against it, so no promotion
        unfit = refused("champion", tested.bars, f"champion version {champion.version} cannot trade this test "
                        f"window ({err})", registry.gate_margin, registry.gate_alpha)
        decision = decide((unfit, *against(tested.curve, "agent", registry, per_year, risk_free)))
        return GateVerdict(decision, f"{decision.line}\n\n{said}")
    seen = seen_bars(fs, w, champion.cutoff)
    held = "" if seen == 0 else (f"no clean window: champion version {champion.version} had trained or selected on "
                                 f"{seen} of the {compared.bars} test bars, so it can be promoted only on the record "
                                 "it trades")
    evidence = against(compared.curve, "agent", registry, per_year, risk_free)
    decision = decide(evidence, held)
    table = gate_table(_arms(params, compared), f"**{decision.action}**: {evidence_line(evidence)}",
                       (compared.start, compared.end), seen)
    return GateVerdict(decision, f"{decision.line}\n\n{table}\n{said}", compared=compared)


def gate_report(params: Params, tested: BacktestResult, shadow: Shadow | None = None,
                record: BacktestResult | None = None, champion: Champion | None = None) -> GateVerdict:
    """The gate's decision on ``tested`` and its report.

    The pipeline's test split (arms ``agent`` and ``buy_and_hold``) faces buy-and-hold and
    the sitting ``champion``, if any (:func:`pipeline_gate`). A cycle's evaluation window
    (``challenger``, ``champion`` unless this is the first model, ``buy_and_hold``) and the
    standing ``shadow``'s ``record`` face the champion and buy-and-hold
    (:func:`tasks.registry.decision.decide_cycle`; no record yet: the shadow keeps its seat
    untested): the side-by-side tables, written to ``data/ct/report/gate.md``, and the
    challenger's tearsheet beside it.
    """
    if CHALLENGER not in tested.metrics:
        return pipeline_gate(params, tested, champion)
    registry, per_year, risk_free = params.registry, periods_per_year(params.data.freq), params.backtest.risk_free
    window = against(tested.curve, CHALLENGER, registry, per_year, risk_free)
    standing = (shadow.version, shadow.tested) if shadow is not None else None
    kept = None
    if shadow is not None and record is not None:
        kept = against(record.curve, ARM, registry, per_year, risk_free)
    decision = decide_cycle(window, standing, kept, params.ct.shadow_bars, params.ct.shadow_max_bars)
    arms = _arms(params, tested)
    dates = (tested.start, tested.end)
    markdown = f"{decision.line}\n\n" + gate_table(arms, f"**{decision.action}**: {evidence_line(window)}", dates,
                                                   tested.seen)
    if decision.shadow is not None and record is not None:
        markdown += "\n" + gate_table(_arms(params, record), decision.shadow.line, (record.start, record.end), None)
    out = params.dirs.ct / CT_FOLDER
    out.mkdir(parents=True, exist_ok=True)
    (out / GATE_FILE).write_text(markdown)
    benchmark = arms[1] if len(arms) == 3 else arms[-1]
    sheet = tearsheet(arms[0], benchmark, out / TEARSHEET_FILE,
                      f"Challenger vs {benchmark.name}, {dates[0]} to {dates[1]}", registry.tearsheet)
    return GateVerdict(decision, markdown, out / GATE_FILE, sheet)
