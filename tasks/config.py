"""The one typed config, loaded from ``params.yaml`` (docs/design.md, stages and seams).

DVC reads the same file as stage params, ``rlops_pipeline`` takes a :class:`Params` as
its Prefect flow parameter, and the register stage logs it, flattened, as MLflow params.
An unknown key or a bad value is a one-line :class:`ConfigError` naming the key.
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path
from typing import Any, Literal, NamedTuple

import yaml
from pydantic import Field, ValidationError, model_validator

from tasks.config_data import DataParams, Section
from tasks.config_ops import BrokerParams, CTParams, ScheduleParams, ServicesParams, TradeParams, WatchParams
from tasks.errors import ConfigError
from trainers.algorithms import DEFAULT_LEARNER, check_names, config_of
from trainers.config import (
    TURBULENCE,
    CompileMode,
    EnvConfig,
    NitroConfig,
    PPOConfig,
    RngDevice,
    RuntimeConfig,
    SACConfig,
)
from trainers.population.config import EvolutionConfig, TournamentConfig
from trainers.population.modes import MODES, modes_where

DEFAULT_PARAMS = Path("params.yaml")

Indicator = Literal[
    "macd", "boll_ub", "boll_lb", "rsi_30", "cci_30", "dx_30", "close_30_sma", "close_60_sma",
    "turbulence", "vix_proxy", "ret_5", "ret_20", "ret_60", "ret_20_xs", "ret_60_xs", "vol_20", "ewm_20", "ewm_40",
    "ewm_20_xs", "ewm_40_xs", "sr_20", "sr_40", "sr_20_xs", "sr_40_xs",
]
"""FinRL's default technical indicators (stockstats names), two market-wide risk features and
the scale-free per-stock features of ``tasks/data/momentum.py``."""
PRICE_UNITS = ("macd", "boll_ub", "boll_lb", "close_30_sma", "close_60_sma")
"""The indicators measured in the stock's price units, which only a per-stock normalisation
makes comparable across stocks."""


class ValidationParams(Section):
    """Stage 2: how strict validation is."""

    max_bad_fraction: float = Field(0.0, ge=0.0, le=1.0, description="quarantined share of rows that stops the run")
    max_gap_bars: int = Field(5, ge=0, description="most consecutive expected bars a symbol may miss")
    outlier_sigma: float = Field(12.0, gt=0.0, description="returns beyond this many robust sds are flagged")
    max_abs_log_return: float = Field(3.0, gt=0.0, description="a bar whose close, or open, lies further than this "
                                      "in |log| from the last kept close (3: a x20 move no listed stock makes in one "
                                      "bar) is quarantined")


class FeatureParams(Section):
    """Stage 3: indicators and the date splits (train < validation < test)."""

    indicators: list[Indicator] = Field(
        default_factory=lambda: ["macd", "boll_ub", "boll_lb", "rsi_30", "cci_30", "dx_30",
                                 "close_30_sma", "close_60_sma", "turbulence", "vix_proxy"],
        min_length=1,
    )
    normalise: Literal["per_stock", "pooled"] = Field(
        "per_stock", description="per_stock: each stock's indicators z-scored with its own train mean and sd "
        "(FinRL's price-unit indicators need it); pooled: one train mean and sd per indicator over all stocks, "
        "for scale-free indicators and a scorer shared across stocks (tasks/data/train_stats.py)")
    warmup: int = Field(121, ge=0, description="bars of history dropped before the first usable bar")
    min_history: int = Field(121, ge=1, description="real bars of its own a symbol needs before it is tradable "
                             "(its indicators' warm-up; tasks/data/tradable.py)")
    turbulence_window: int = Field(120, ge=2, description="bars of returns behind each turbulence estimate")
    turbulence_refresh: int = Field(1, ge=1, description="bars between covariance re-estimates (390 = daily on 1min)")
    vix_window: int = Field(21, ge=2, description="bars in the volatility-index proxy")
    train_start: date | None = Field(None, description="first day of train (unset: the first bar after warm-up); "
                                     "earlier bars still give the indicators their history")
    train_end: date | None = Field(None, description="last day of train; unset (with val_end): train is the "
                                   "first 75% of the history's days (tasks/data/splits.py)")
    val_end: date | None = Field(None, description="last day of validation; unset: validation is the next "
                                 "12.5%, test the last 12.5%")

    @model_validator(mode="after")
    def _check(self) -> FeatureParams:
        if (self.train_end is None) != (self.val_end is None):
            raise ValueError("set both train_end and val_end, or neither (then 75/12.5/12.5% of the history)")
        if self.train_end is not None and self.val_end is not None and self.train_end >= self.val_end:
            raise ValueError("train_end must be before val_end")
        if self.train_start is not None and self.train_end is not None and self.train_start >= self.train_end:
            raise ValueError("train_start must be before train_end")
        if len(set(self.indicators)) != len(self.indicators):
            raise ValueError("indicators must not repeat")
        priced = [name for name in self.indicators if name in PRICE_UNITS]
        if self.normalise == "pooled" and priced:
            raise ValueError(f"normalise: pooled puts every stock's indicators on one scale, but {', '.join(priced)} "
                             "are in price units (a $6 and a $600 stock would differ by 100x): use per_stock")
        if "turbulence" in self.indicators and self.warmup <= self.turbulence_window:
            raise ValueError("warmup must exceed turbulence_window (turbulence needs that much history)")
        if "vix_proxy" in self.indicators and self.warmup < self.vix_window:
            raise ValueError("warmup must be at least vix_window")
        return self


class TrainParams(Section):
    """Stage 4: where and how the population trains."""

    device: Literal["auto", "cpu", "cuda"] = "auto"
    engine: Literal["multiplexed", "serial", "dask"] = Field(
        "multiplexed", description="multiplexed: a generation's agents as one batched model in this process; "
        "serial: one agent after another; dask: each agent's generation (or tournament job) as a Prefect task on Dask")
    dask: str = Field("local", description="engine dask: 'local' (a LocalCluster on 127.0.0.1) or a scheduler "
                      "address such as tcp://host:8786")
    dask_workers: int = Field(2, ge=1, description="worker processes of the 'local' cluster")
    profile: bool = Field(False, description="profile training (trainers/profiler.py); `--profile` sets it")
    resume: bool = Field(False, description="continue a killed run from its last generation; `--resume` sets it")
    compile: CompileMode = Field("eager", description="eager: kernels launched one by one; graphs: record the "
                                 "rollout, the update and the evaluator's decision once as CUDA graphs and replay "
                                 "them (CUDA only); inductor: torch.compile their bodies too; kernel: as inductor, "
                                 "the PPO update's loss and gradients in one Triton kernel (docs/training.md, GPU "
                                 "workers)")
    deterministic: bool = Field(False, description="torch.use_deterministic_algorithms: a CUDA run repeats bit "
                                "for bit on the same GPU, somewhat slower")
    rng: RngDevice = Field("device", description="device: random streams on the training device; cpu: on the "
                           "CPU, so a CUDA run draws exactly the numbers a CPU run draws (to check one against "
                           "the other)")

    @property
    def runtime(self) -> RuntimeConfig:
        """How the steps execute, for the trainers."""
        return RuntimeConfig(self.compile, self.deterministic, self.rng)

    @model_validator(mode="after")
    def _check_dask(self) -> TrainParams:
        if self.dask != "local" and not self.dask.startswith(("tcp://", "tls://")):
            raise ValueError("dask must be 'local' or a scheduler address like tcp://host:8786")
        return self


class BacktestParams(Section):
    risk_free: float = Field(0.0, description="annual risk-free rate for the Sharpe ratio")


class RegistryParams(Section):
    """Stage 6: the MLflow store and the champion gate."""

    tracking_uri: str = "sqlite:///mlflow/mlflow.db"
    artifact_root: Path = Path("mlflow/artifacts")
    experiment: str = "podracer"
    model_name: str = "podracer-ppo"
    gate_alpha: float = Field(0.05, gt=0, lt=1, description="promote only when the one-sided p-value of the "
                              "paired Sharpe difference is below this against every benchmark (docs/operations.md)")
    gate_margin: float = Field(0.05, description="H0: the annualised Sharpe edge over a benchmark is at most this: "
                               "0.05 is what two round trips of the whole book a year cost at env.cost_pct 0.2% on a "
                               "market of 16% annual volatility (2 x 2 x 0.002 / 0.16), so an edge smaller than its "
                               "trading cost is never significant (docs/operations.md); negative values are for "
                               "tests that must promote")
    gate_resamples: int = Field(2000, ge=99, description="circular-block bootstrap resamples per paired test")
    gate_seed: int = Field(0, description="the bootstrap's seed: the same returns give the same verdict")
    tearsheet: bool = Field(True, description="draw a CT cycle's quantstats tearsheet (gate/tearsheet.html; a few "
                            "seconds of each cycle); false: a plain page with the gate's metrics table")
    ensemble: int = Field(1, ge=1, description="register the top k agents as one model, acting on the mean of "
                          "their target allocations (trainers/population/ensemble.py); 1: the best validation "
                          "snapshot alone")


class Params(Section):
    """Everything a pipeline run needs; ``params.yaml`` overrides the defaults."""

    data_dir: Path = Path("data")
    data: DataParams = DataParams()
    validation: ValidationParams = ValidationParams()
    features: FeatureParams = FeatureParams()
    env: EnvConfig = EnvConfig()
    ppo: PPOConfig = PPOConfig()
    sac: SACConfig = SACConfig()
    evolution: EvolutionConfig = EvolutionConfig()
    tournament: TournamentConfig = TournamentConfig()
    nitro: NitroConfig = NitroConfig()
    train: TrainParams = TrainParams()
    backtest: BacktestParams = BacktestParams()
    registry: RegistryParams = RegistryParams()
    broker: BrokerParams = BrokerParams()
    trade: TradeParams = TradeParams()
    services: ServicesParams = ServicesParams()
    ct: CTParams = CTParams()
    watch: WatchParams = WatchParams()
    schedule: ScheduleParams = ScheduleParams()

    @model_validator(mode="after")
    def _check(self) -> Params:
        check_names(self.tournament.algorithms)
        if self.env.turbulence_threshold is not None and TURBULENCE not in self.features.indicators:
            raise ValueError("env.turbulence_threshold needs 'turbulence' in features.indicators")
        self.env.check_freq(self.data.freq)
        start = self.ppo.start_ranked_by
        if start is not None and start >= len(self.features.indicators):
            raise ValueError(f"ppo.start_ranked_by {start} names no input: features.indicators has "
                             f"{len(self.features.indicators)}")
        if start is not None and min(self.evolution.search_space.get("net_width", [2])) < 2:
            raise ValueError("ppo.start_ranked_by needs 2 hidden units: evolution.search_space.net_width "
                             "must start at 2")
        mode, learners = MODES[self.evolution.mode], set(self.tournament.algorithms)
        if learners != set(mode.learners(self.tournament)):
            able = modes_where(lambda other: set(other.learners(self.tournament)) == learners)
            raise ValueError(f"tournament.algorithms other than {DEFAULT_LEARNER} need evolution.mode: {able}")
        for name in self.tournament.algorithms:
            policy = config_of(self, name).policy
            if policy != self.ppo.policy:
                raise ValueError(f"{name}.policy {policy} must equal ppo.policy {self.ppo.policy}: a model "
                                 "records one policy kind, and an ensemble may mix both learners")
        pool = mode.kept(self.evolution, self.tournament)
        if self.registry.ensemble > pool:
            raise ValueError(f"registry.ensemble {self.registry.ensemble} is more agents than the "
                             f"{self.evolution.mode} run keeps ({pool})")
        return self

    @property
    def dirs(self) -> Layout:
        return Layout.under(self.data_dir)

    def flat(self) -> dict[str, str]:
        """``section.key -> value`` strings, as logged to MLflow params."""
        out: dict[str, str] = {}
        for section, values in self.model_dump(mode="json").items():
            items = values.items() if isinstance(values, dict) else [(None, values)]
            for key, value in items:
                name = f"{section}.{key}" if key else section
                out[name] = value if isinstance(value, str) else json.dumps(value)
        return out


class Layout(NamedTuple):
    """Where each stage reads and writes under ``data_dir`` (docs/design.md, stages and seams)."""

    raw: Path
    validated: Path
    quarantine: Path
    features: Path
    models: Path
    backtest: Path
    broker: Path
    checkpoints: Path
    ct: Path
    """The continuous-training cycle's work: challenger, champion and their backtests."""

    @classmethod
    def under(cls, root: Path) -> Layout:
        return cls(*(root / name for name in cls._fields))


def _one_line(error: ValidationError, source: str) -> str:
    parts = []
    for err in error.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
            msg = "unknown key"
        parts.append(f"{loc}: {msg}")
    return f"{source}: " + "; ".join(parts)


def apply_override(tree: dict[str, Any], assignment: str) -> None:
    """Set ``KEY=VALUE`` (a dotted key, a YAML value) in the params tree ``tree``, as ``-s`` does."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key:
        raise ConfigError(f"override {assignment!r}: expected KEY=VALUE, e.g. ppo.lr=0.001")
    *parents, leaf = key.split(".")
    node = tree
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {assignment!r}: {part} is not a section")
    node[leaf] = yaml.safe_load(raw)


def load_params(path: Path | str = DEFAULT_PARAMS, overrides: list[str] | None = None) -> Params:
    """Read and validate ``path`` (missing file = all defaults), then apply ``KEY=VALUE`` overrides."""
    path = Path(path)
    tree: dict[str, Any] = {}
    if path.exists():
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{path}: expected a mapping of sections at the top level")
        tree = loaded or {}
    for assignment in overrides or []:
        apply_override(tree, assignment)
    try:
        return Params.model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(_one_line(exc, str(path))) from None
