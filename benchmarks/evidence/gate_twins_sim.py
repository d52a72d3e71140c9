"""Null CT years simulated from the measured near-twins, through the real gate.

``benchmarks/evidence/gate_twins.py measure`` measures the cycle's real challengers
(docs/results/gate-twins.json); this module turns the measurement into per-bar returns and
runs a year of nightly cycles through :func:`benchmarks.gate_sim.shadow_gate`, which calls
the shipped :func:`~tasks.registry.evidence.against` and
:func:`~tasks.registry.decision.decide_cycle` (docs/operations.md, the gate).

The model (:class:`TwinModel`), per bar, with σ_t a GARCH(1,1)-t volatility at the measured
market volatility:

* buy-and-hold: μ + σ_t z_t, z_t standardised Student-t;
* the champion: buy-and-hold + e_t, e an AR(1) at the measured champion − buy-and-hold
  tracking error and lag-1 autocorrelation, scaled by σ_t / σ̄ (a weight difference earns
  the market's dispersion, which moves with its volatility), mean 0;
* night j's challenger: the champion of that night + d_j, its own AR(1) at the measured
  challenger − champion tracking error and autocorrelation, mean 0, from its window's first
  bar on; a shadow's record continues the same series. A promoted shadow is the champion
  the later challengers are twins of.

Each arm starts from cash at every window and every record start, as the cycle's backtests
do, and pays its **entry cost** on that first bar (the measured first-bar cost: policies the
larger of their median and buy-and-hold's, buy-and-hold its own). **The null is exact**:
every true Sharpe difference is ≤ 0. The noises are independent with mean 0, so an arm's
volatility is at least its benchmark's at the same mean; an entry cost at least the
benchmark's keeps that when the market's drift covers it over the shortest tested stretch
(μ × min(eval_bars, shadow_bars) ≥ the cost: :meth:`TwinModel.exact` checks). Where the
measured market Sharpe is too small for that (minute bars: 3 sessions of drift against a
0.2% entry), it is raised to :meth:`TwinModel.exact_sharpe`, and the JSON says so.

What it leaves out: the real cycle's nightly challengers often repeat (same train split and
seed, only the selection moves: 12 distinct in 60 measured nights); here every night's twin
is drawn afresh. Minute bars reuse the daily measurement (the same annualised tracking
errors, the same lag-1 autocorrelation per bar; :meth:`TwinModel.finer`).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from benchmarks.common import ROOT
from benchmarks.evidence.gate_sim import NIGHTS, Judge, shadow_gate
from tasks.config import Params, RegistryParams, load_params
from tasks.registry.evidence import Evidence

TWINS_JSON = ROOT / "docs/results/gate-twins.json"
CONFIGS = {"daily": ("params.yaml", 1), "minute": ("params.minute.yaml", 390)}
"""Config → its params file and the bars between two nightly cycles."""


@dataclass(frozen=True)
class TwinModel:
    """Per-bar returns of buy-and-hold, champion and near-twin challengers (annualised inputs)."""

    per_year: float
    market_vol: float
    market_sharpe: float
    garch: tuple[float, float, float]
    """GARCH(1,1)-t's α, β and ν (degrees of freedom); ω follows from ``market_vol``."""
    champion_te: float
    champion_ar1: float
    twin_te: float
    twin_ar1: float
    entry_policy: float
    entry_hold: float
    twin_edge: float = 0.0
    """The challengers' true annualised mean return over their champion: 0 in a null year;
    a positive edge plants a real one (the tests' check that the gate can promote)."""

    @property
    def mu(self) -> float:
        return self.market_sharpe * self.market_vol / self.per_year

    def exact(self, shortest: int) -> list[str]:
        """Why the null would not be exact over ``shortest`` bars (empty: it is)."""
        why = []
        if self.entry_policy < self.entry_hold:
            why.append(f"policy entry cost {self.entry_policy:.5f} < buy-and-hold's {self.entry_hold:.5f}")
        if self.mu * shortest < self.entry_policy * (1.0 - 1e-9):
            why.append(f"drift {self.mu:.2e} × {shortest} bars < entry cost {self.entry_policy:.5f}")
        if self.market_sharpe < 0 or min(self.champion_te, self.twin_te) < 0:
            why.append("negative market Sharpe or tracking error")
        return why

    def market(self, rng: np.random.Generator, bars: int, burn: int = 500) -> tuple[np.ndarray, np.ndarray]:
        """``bars`` returns of buy-and-hold and their conditional volatility over σ̄."""
        a, b, nu = self.garch
        sd = self.market_vol / math.sqrt(self.per_year)
        omega = sd**2 * (1.0 - a - b)
        z = rng.standard_t(nu, bars + burn) * math.sqrt((nu - 2.0) / nu)
        var = np.empty(bars + burn)
        var[0], eps = sd**2, 0.0
        for t in range(bars + burn):
            if t:
                var[t] = omega + a * eps**2 + b * var[t - 1]
            eps = math.sqrt(var[t]) * z[t]
        vol = np.sqrt(var[burn:])
        return self.mu + vol * z[burn:], vol / sd

    def noise(self, rng: np.random.Generator, scale: np.ndarray, te: float, phi: float) -> np.ndarray:
        """A stationary AR(1) with lag-1 autocorrelation ``phi`` and sd ``te`` / sqrt(per_year),
        mean 0, multiplied by ``scale`` (the market's volatility over σ̄)."""
        from scipy.signal import lfilter

        sd = te / math.sqrt(self.per_year)
        shocks = rng.standard_normal(scale.size) * sd * math.sqrt(1.0 - phi**2)
        shocks[0] = rng.standard_normal() * sd  # the stationary start
        return lfilter([1.0], [1.0, -phi], shocks) * scale

    def finer(self, step: int) -> TwinModel:
        """The same year on bars ``step`` times finer (minute bars: 390 a session): the
        annualised inputs stay; GARCH keeps its persistence per ``step`` bars, its news
        impact spread over them."""
        if step == 1:
            return self
        a, b, nu = self.garch
        persistence = (a + b) ** (1.0 / step)
        return replace(self, per_year=self.per_year * step, garch=(a / step, persistence - a / step, nu))

    def exact_sharpe(self, shortest: int) -> float:
        """The smallest market Sharpe whose drift covers the policies' entry cost over ``shortest`` bars."""
        return self.entry_policy * self.per_year / (shortest * self.market_vol)


class TwinArms:
    """The year's arms for :class:`benchmarks.gate_sim.Judge`: rule 0 is the year's first
    champion, rule ``j + 1`` night ``j``'s challenger, a twin of the rule ``parents[j]``.
    Returns are indexed by bar 1..``bars`` (``r[t]``: close t−1 to close t)."""

    def __init__(self, model: TwinModel, seed: int, bars: int, starts: list[int], parents: list[int],
                 risk_free: float = 0.0) -> None:
        self.model, self.per_year, self.risk_free = model, model.per_year, risk_free
        self.seed, self.starts, self.parents = seed, starts, parents
        self._bars = bars
        rng = np.random.default_rng([seed, 0])
        market, self.scale = model.market(rng, bars)
        self.hold = np.concatenate(([0.0], market))
        champion = model.noise(np.random.default_rng([seed, 1]), self.scale, model.champion_te, model.champion_ar1)
        self.own = {0: np.concatenate(([0.0], champion))}
        self.cache: dict[int, np.ndarray] = {}

    @property
    def bars(self) -> int:
        return self._bars

    def twin(self, j: int) -> np.ndarray:
        """Challenger ``j``'s own difference from its parent, from its window's first bar on."""
        lo = self.starts[j]
        d = self.model.noise(np.random.default_rng([self.seed, 2 + j]), self.scale[lo:], self.model.twin_te,
                             self.model.twin_ar1)
        return np.concatenate((np.zeros(lo + 1), d + self.model.twin_edge / self.per_year))

    def returns(self, rule: int) -> np.ndarray:
        """Rule ``rule``'s per-bar returns; champions stay cached, other challengers a few
        at a time (a year of minute bars is 98,280 a rule)."""
        if rule not in self.cache:
            if rule == 0:
                series = self.hold + self.own[0]
            else:
                series = self.returns(self.parents[rule - 1]) + self.twin(rule - 1)
            keep = set(self.parents) | {0}
            passing = [k for k in self.cache if k not in keep]
            for k in passing[:-3]:
                del self.cache[k]
            self.cache[rule] = series
        return self.cache[rule]

    @staticmethod
    def _curve(r: np.ndarray, cost: float) -> np.ndarray:
        growth = 1.0 + r
        growth[0] *= 1.0 - cost
        return np.concatenate(([1.0], np.cumprod(growth)))

    def rule(self, rule: int, lo: int, hi: int) -> np.ndarray:
        """Rule ``rule`` started from cash at close ``lo``: its values at closes ``lo..hi``."""
        return self._curve(self.returns(rule)[lo + 1 : hi + 1].copy(), self.model.entry_policy)

    def market(self, lo: int, hi: int) -> np.ndarray:
        return self._curve(self.hold[lo + 1 : hi + 1].copy(), self.model.entry_hold)


class ScreenJudge(Judge):
    """:class:`~benchmarks.gate_sim.Judge` whose challenger-window tests run with
    ``screen_resamples``. A cycle's challenger is never promoted on its window:
    ``decide_cycle`` reads its window evidence only through the screen (the point estimate
    and the fault), which the resample count does not change, so the decisions are those of
    the full count; only a shadow's record, whose p-value decides, needs it."""

    def __init__(self, arms: TwinArms, registry: RegistryParams, screen_resamples: int) -> None:
        super().__init__(arms, registry)
        self.screen = registry.model_copy(update={"gate_resamples": screen_resamples})

    def pair(self, rule: int, bench: int | None, lo: int, hi: int) -> Evidence:
        full, arms = self.registry, self.arms
        if rule > 0 and lo == arms.starts[rule - 1]:  # the challenger's own window; a record starts after it
            self.registry = self.screen
        try:
            return super().pair(rule, bench, lo, hi)
        finally:
            self.registry = full


@dataclass(frozen=True)
class YearConfig:
    name: str
    eval_bars: int
    shadow_bars: int
    step: int
    max_bars: int | None
    alpha: float
    margin: float
    resamples: int
    resamples_shipped: bool
    nights: int = NIGHTS
    screen_resamples: int | None = 99
    """Resamples of the challengers' window tests (:class:`ScreenJudge`); None: ``resamples``."""

    @property
    def bars(self) -> int:
        return self.eval_bars + (self.nights - 1) * self.step

    @property
    def bound(self) -> float:
        """The union bound on false promotions a year: α × record bars a year / shadow_bars."""
        return self.alpha * self.nights * self.step / self.shadow_bars


def year_config(params: Params, name: str, step: int, resamples: int | None, screen: int | None = 99) -> YearConfig:
    r = params.registry
    return YearConfig(name, params.ct.eval_bars, params.ct.shadow_bars, step,
                      getattr(params.ct, "shadow_max_bars", None), r.gate_alpha, r.gate_margin,
                      resamples or r.gate_resamples, resamples in (None, r.gate_resamples), screen_resamples=screen)


def null_year(model: TwinModel, config: YearConfig, params: Params, seed: int) -> dict[str, Any]:
    """One simulated year: the gate's promotions, looks and shadows (``params``' registry with
    ``config``'s α, margin and resamples; ``params``' risk-free rate). A promotion makes the
    promoted shadow the parent of the later challengers; the year is run again from there
    (the nights before it are unchanged, their tests cached)."""
    registry = params.registry.model_copy(update={"gate_resamples": config.resamples, "gate_alpha": config.alpha,
                                                  "gate_margin": config.margin})
    nights = config.nights
    first = config.bars - (nights - 1) * config.step
    starts = [first + j * config.step - config.eval_bars for j in range(nights)]
    parents, cache = [0] * nights, {}
    while True:
        arms = TwinArms(model, seed, config.bars, starts, parents, params.backtest.risk_free)
        judge = ScreenJudge(arms, registry, config.screen_resamples or config.resamples)
        judge.cache.update(cache)
        year = shadow_gate(judge, list(range(1, nights + 1)), config.eval_bars, config.shadow_bars,
                           champion=0, step=config.step, max_bars=config.max_bars, lazy=True)
        wanted, parent = [], 0
        promoted = dict(year.promotions)
        for night in range(nights):
            wanted.append(parent)
            parent = promoted.get(night, parent)
        if wanted == parents:
            break
        changed: set[int] = set()
        for j in range(nights):  # a parent is an earlier night's challenger: one pass in order
            if wanted[j] != parents[j] or wanted[j] in changed:
                changed.add(j + 1)
        cache = {k: v for k, v in judge.cache.items() if k[0] not in changed and k[1] not in changed}
        parents = wanted
    return {"seed": seed, "promotions": [n for n, _ in year.promotions], "tests": year.tests,
            "entered": year.entered, "shadow_moves": year.shadow_moves, "evidence": len(judge.cache)}


def interval(counts: list[int]) -> dict[str, Any]:
    """Mean false promotions a year (exact Poisson 95% interval, and a t interval that does
    not assume Poisson) and the share of years with any (Clopper–Pearson 95%)."""
    n, total = len(counts), sum(counts)
    low = stats.chi2.ppf(0.025, 2 * total) / 2 / n if total else 0.0
    high = stats.chi2.ppf(0.975, 2 * total + 2) / 2 / n
    any_ = sum(c > 0 for c in counts)
    cp_low, cp_high = stats.binomtest(any_, n).proportion_ci(0.95, method="exact")
    sd = statistics.stdev(counts) if n > 1 else math.nan
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n) if n > 1 else math.nan
    return {"years": n, "mean": total / n, "poisson95": [low, high], "t95": [total / n - half, total / n + half],
            "max": max(counts), "years_with_any": any_, "share_with_any": any_ / n,
            "clopper_pearson95": [float(cp_low), float(cp_high)]}


def load_model(path: Path, overrides: dict[str, float]) -> TwinModel:
    summary = json.loads(path.read_text())["summary"]
    model = summary["model"]
    model["garch"] = tuple(model["garch"])
    return replace(TwinModel(**model), **overrides)


def _year_job(job: tuple[TwinModel, YearConfig, str, list[str], int]) -> dict[str, Any]:
    model, config, params_file, params_overrides, seed = job
    warnings.filterwarnings("ignore", category=RuntimeWarning, module="arch")
    clock, cpu = time.perf_counter(), time.process_time()
    row = null_year(model, config, load_params(ROOT / params_file, params_overrides), seed)
    row["seconds"], row["cpu_seconds"] = time.perf_counter() - clock, time.process_time() - cpu
    print(f"{config.name} year {seed}: {len(row['promotions'])} promotions, {row['tests']} tests, "
          f"{row['entered']} shadows, {row['seconds']:.0f} s ({row['cpu_seconds']:.0f} CPU-s)", flush=True)
    return row


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", choices=tuple(CONFIGS), default="daily")
    p.add_argument("--years", default="700-799", help="year seeds, e.g. 700-799 (never used before)")
    p.add_argument("--twins", type=Path, default=TWINS_JSON, help="a measure --json")
    p.add_argument("--resamples", type=int, help="FEWER BOOTSTRAP RESAMPLES than the config's, for a quick look "
                   "only (labelled in the output)")
    p.add_argument("--screen-resamples", type=int, default=99,
                   help="resamples of the challengers' window tests, which decide through their point estimate "
                   "only (0: the full count; the decisions are the same)")
    p.add_argument("--set-model", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a TwinModel field (e.g. twin_ar1=0.3), labelled in the output")
    p.add_argument("--set", "-s", dest="overrides", action="append", default=[],
                   help="override a key of the config's params file (e.g. ct.shadow_max_bars=9750)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--json", type=Path, help="default docs/results/gate-twins-null-<config>.json")


def main(args: argparse.Namespace, line: str) -> None:
    from benchmarks.common import seeds_of
    from benchmarks.evidence.gate import run_jobs, write

    params_file, step = CONFIGS[args.config]
    params = load_params(ROOT / params_file, args.overrides)
    overrides = {k: float(v) for k, v in (s.split("=", 1) for s in args.set_model)}
    model = load_model(args.twins, overrides)
    model = model.finer(step)
    config = year_config(params, args.config, step, args.resamples, args.screen_resamples or None)
    shortest = min(config.eval_bars, config.shadow_bars)
    raised = None
    if model.market_sharpe < model.exact_sharpe(shortest):
        raised = {"measured": model.market_sharpe, "used": model.exact_sharpe(shortest)}
        model = replace(model, market_sharpe=model.exact_sharpe(shortest))
    inexact = model.exact(shortest)
    if inexact:
        raise SystemExit("gate_twins simulate: the null is not exact: " + "; ".join(inexact))
    seeds = seeds_of(args.years)
    started = time.perf_counter()
    jobs = [(model, config, params_file, args.overrides, s) for s in seeds]
    rows = run_jobs(_year_job, jobs, args.jobs)
    counts = [len(r["promotions"]) for r in rows]
    result = {"command": line, "minutes": (time.perf_counter() - started) / 60,
              "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "config": asdict(config), "params": params_file, "params_overrides": args.overrides,
              "union_bound": config.bound, "model": asdict(model),
              "model_overrides": overrides, "market_sharpe_raised_for_exactness": raised,
              "false_promotions": interval(counts),
              "tests_a_year": statistics.fmean(r["tests"] for r in rows),
              "shadows_a_year": statistics.fmean(r["entered"] for r in rows),
              "seconds_a_year": statistics.median(r["seconds"] for r in rows),
              "cpu_seconds_a_year": statistics.median(r["cpu_seconds"] for r in rows), "rows": rows}
    if not config.resamples_shipped:
        result["warning"] = f"gate_resamples {config.resamples}: NOT the shipped setting"
    path = args.json or ROOT / f"docs/results/gate-twins-null-{args.config}.json"
    write(result, path)
    print(json.dumps({k: result[k] for k in ("config", "union_bound", "false_promotions", "tests_a_year",
                                             "shadows_a_year", "seconds_a_year",
                                             "cpu_seconds_a_year")}, indent=1))
    if "warning" in result:
        print(result["warning"])
