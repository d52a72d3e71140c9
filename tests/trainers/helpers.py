"""Small hand-made markets for trainer tests, and whole runs as the train stage makes them."""

from pathlib import Path

import torch

from trainers.common.env import MarketData
from trainers.common.state import StateScales
from trainers.config import EnvConfig, NitroConfig, PPOConfig
from trainers.population.config import EvolutionConfig, TournamentConfig
from trainers.population.dispatch import JobPool
from trainers.population.evolution import Evolution, EvolutionResult, JobRunner, ProgressFn, run_serially
from trainers.population.tournament import Tournament


def market(t: int = 40, n: int = 3, k: int = 2, seed: int = 0) -> MarketData:
    g = torch.Generator().manual_seed(seed)
    close = 50 * torch.exp(torch.cumsum(0.02 * torch.randn(t, n, generator=g, dtype=torch.float64), 0))
    open_ = close * torch.exp(0.01 * torch.randn(t, n, generator=g, dtype=torch.float64))
    feats = torch.randn(t, n, k, generator=g)
    return MarketData(open=open_, close=close, features=feats)


def ragged_market() -> MarketData:
    """Two stocks over 4 bars. A trades at bars 0-1 and then stops (delisted); B lists at bar 1."""
    close = torch.tensor([[100.0, 50.0], [110.0, 50.0], [110.0, 60.0], [110.0, 70.0]], dtype=torch.float64)
    open_ = torch.tensor([[99.0, 50.0], [105.0, 52.0], [999.0, 58.0], [999.0, 66.0]], dtype=torch.float64)
    feats = torch.tensor([[[1.0], [7.0]], [[2.0], [3.0]], [[9.0], [4.0]], [[9.0], [5.0]]])
    tradable = torch.tensor([[True, False], [True, True], [False, True], [False, True]])
    return MarketData(open=open_, close=close, features=feats, tradable=tradable)


def scales(data: MarketData, cfg: EnvConfig) -> StateScales:
    return StateScales(1 / cfg.initial_cash, 1 / cfg.hmax, tuple(data.close[0].tolist()))


def evolve(data: MarketData, scales: StateScales, env_cfg: EnvConfig, ppo_cfg: PPOConfig, evo_cfg: EvolutionConfig,
           train_window: tuple[int, int], val_window: tuple[int, int], *, per_year: float,
           on_evaluated: ProgressFn | None = None, checkpoint_dir: Path | None = None, resume: bool = False,
           runner: JobRunner = run_serially, nitro: NitroConfig = NitroConfig()) -> EvolutionResult:
    """A generational run as the train stage makes one (``tasks/model/train.py``), resumed from
    ``checkpoint_dir`` with ``resume``."""
    run = Evolution(data, scales, env_cfg, ppo_cfg, evo_cfg, train_window, val_window, per_year, nitro)
    if resume:
        run.resume(checkpoint_dir)
    return run.run(on_evaluated, checkpoint_dir, runner)


def tournament(data: MarketData, scales: StateScales, env_cfg: EnvConfig, ppo_cfg: PPOConfig,
               evo_cfg: EvolutionConfig, tcfg: TournamentConfig, train_window: tuple[int, int],
               val_window: tuple[int, int], *, per_year: float, on_evaluated: ProgressFn | None = None,
               checkpoint_dir: Path | None = None, resume: bool = False, pool: JobPool | None = None,
               nitro: NitroConfig = NitroConfig()) -> EvolutionResult:
    """A tournament run as the train stage makes one, resumed from ``checkpoint_dir`` with ``resume``."""
    run = Tournament(data, scales, env_cfg, ppo_cfg, evo_cfg, tcfg, train_window, val_window, per_year, nitro)
    if resume:
        run.resume(checkpoint_dir)
    return run.run(on_evaluated, checkpoint_dir, pool)
