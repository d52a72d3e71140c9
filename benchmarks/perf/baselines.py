"""The FinRL + Stable-Baselines3 side of the training benchmark.

FinRL's ``StockTradingEnv`` (``finrl==0.3.7``, installed with ``pip install --no-deps``)
is loaded straight from its file, so ``finrl/__init__.py`` and its heavy dependencies
never run. These functions take plain arrays, so both sides of the benchmark can use
the same feature set.

How FinRL's env differs from ours (``trainers/common/env.py``), which matters for reading the
results:

* the state is ``[cash] + closes + shares + indicators`` (``1 + 2n + k·n``), with cash,
  prices and share counts left unscaled;
* an order placed on day t fills at day t's **close**, the close the agent has just
  seen. Ours fills at bar t+1's open;
* an episode covers the whole frame. The step taken on the last day is a no-op that
  returns ``terminated=True`` and repeats the previous reward. SB3 treats it as a
  terminal state and does not bootstrap from it. Ours truncates and does bootstrap;
* a stock whose first indicator is exactly ``1.0`` on a day cannot be traded that day
  (FinRL reads that slot as a "disabled" flag).
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import pandas as pd

from trainers.common.metrics import sharpe

log = logging.getLogger("podracer.benchmarks.baselines")
ENV_FILE = ("meta", "env_stock_trading", "env_stocktrading.py")
MISSING = "finrl is not installed: run `make install` (pip install --no-deps finrl==0.3.7)"
BASE_COLUMNS = ("date", "tic", "close", "high", "low", "open", "volume")

_env_class: type | None = None


def load_finrl_env_class() -> type:
    """FinRL's ``StockTradingEnv`` class, loaded without running ``finrl/__init__.py``."""
    global _env_class
    if _env_class is not None:
        return _env_class
    spec = importlib.util.find_spec("finrl")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(MISSING)
    path = "/".join((spec.submodule_search_locations[0], *ENV_FILE))
    file_spec = importlib.util.spec_from_file_location("_finrl_env_stocktrading", path)
    if file_spec is None or file_spec.loader is None:
        raise ImportError(f"{MISSING} ({path} is missing)")
    module = importlib.util.module_from_spec(file_spec)
    sys.modules[file_spec.name] = module
    file_spec.loader.exec_module(module)
    _env_class = module.StockTradingEnv
    return _env_class


def finrl_frame(
    timestamps: np.ndarray,
    symbols: Sequence[str],
    close: np.ndarray,
    indicators: dict[str, np.ndarray],
    high: np.ndarray | None = None,
    low: np.ndarray | None = None,
    open_: np.ndarray | None = None,
    volume: np.ndarray | None = None,
) -> pd.DataFrame:
    """``[T, n]`` panels as FinRL's long frame: one row per (day, ticker).

    The columns are ``date, tic, close, high, low, open, volume`` followed by the indicators
    in ``indicators`` order. The rows are sorted by date and then ticker, and the index is
    the day number ``0..T-1`` repeated ``n`` times, because the env reads a day with
    ``df.loc[day, :]``. The stocks therefore appear in the state in sorted-symbol order.
    FinRL's env uses only close and the indicators. If high, low or open is missing the
    close is used instead, and a missing volume is 0.
    """
    close = np.asarray(close, dtype=np.float64)
    t, n = close.shape
    if len(timestamps) != t or len(symbols) != n:
        raise ValueError(f"finrl_frame: close is {close.shape} but there are {len(timestamps)} timestamps, "
                         f"{len(symbols)} symbols")
    clash = set(indicators) & set(BASE_COLUMNS)
    if clash:
        raise ValueError(f"finrl_frame: indicator names clash with FinRL's columns: {sorted(clash)}")
    order = np.argsort(np.asarray(symbols, dtype=str), kind="stable")
    panels: dict[str, np.ndarray] = {
        "close": close,
        "high": close if high is None else high,
        "low": close if low is None else low,
        "open": close if open_ is None else open_,
        "volume": np.zeros_like(close) if volume is None else volume,
    }
    for name, values in indicators.items():
        if np.shape(values) != (t, n):
            raise ValueError(f"finrl_frame: indicator {name!r} is {np.shape(values)}, expected {(t, n)}")
        panels[name] = values
    columns: dict[str, Any] = {
        "date": np.repeat(pd.to_datetime(np.asarray(timestamps)).to_numpy(), n),
        "tic": np.tile(np.asarray(symbols, dtype=object)[order], t),
    }
    for name, values in panels.items():
        columns[name] = np.asarray(values, dtype=np.float64)[:, order].reshape(-1)
    frame = pd.DataFrame(columns, index=pd.Index(np.repeat(np.arange(t), n)))
    if indicators:
        first = next(iter(indicators))
        flagged = int((frame[first] == 1.0).sum())
        if flagged:
            log.warning("%d rows have %s == 1.0; FinRL does not trade those stocks on those days", flagged, first)
    return frame


def make_finrl_env(
    frame: pd.DataFrame,
    n_stocks: int,
    indicator_names: Sequence[str],
    hmax: int = 100,
    initial_amount: float = 1_000_000,
    cost_pct: float = 0.002,
    reward_scaling: float = 1e-4,
) -> gym.Env:
    """A quiet FinRL ``StockTradingEnv`` on ``frame``, which comes from :func:`finrl_frame`.

    It is reset once already, so FinRL's end-of-episode printout, which runs when
    ``episode % print_verbosity == 0``, never runs.
    """
    names = list(indicator_names)
    env = load_finrl_env_class()(
        df=frame, stock_dim=n_stocks, hmax=hmax, initial_amount=initial_amount,
        num_stock_shares=[0] * n_stocks, buy_cost_pct=[cost_pct] * n_stocks, sell_cost_pct=[cost_pct] * n_stocks,
        reward_scaling=reward_scaling, state_space=1 + 2 * n_stocks + len(names) * n_stocks,
        action_space=n_stocks, tech_indicator_list=names, make_plots=False, print_verbosity=sys.maxsize,
    )
    env.reset()
    return env


def step_rate(env: gym.Env, seconds: float, seed: int) -> float:
    """How many steps per second ``env`` runs under uniform random actions in ``[-1, 1]^n``.

    The env is reset whenever an episode ends. FinRL's final no-op step counts as a step.
    """
    rng = np.random.default_rng(seed)
    shape = env.action_space.shape
    env.reset(seed=seed)
    steps, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds or steps == 0:
        _, _, terminated, truncated, _ = env.step(rng.uniform(-1.0, 1.0, shape).astype(np.float32))
        steps += 1
        if terminated or truncated:
            env.reset()
    return steps / max(elapsed, 1e-9)


@dataclass(frozen=True)
class EvalPoint:
    train_s: float
    """Training wall time so far, excluding the time spent evaluating."""
    timesteps: int
    sharpe: float


@dataclass
class SB3Result:
    model: Any
    timesteps: int
    train_s: float
    """The wall time of ``learn()`` minus the time spent evaluating."""
    total_s: float
    """The wall time of ``learn()``, evaluations included."""
    samples_per_s: float
    curve: list[EvalPoint] = field(default_factory=list)


def _eval_callback(eval_fn: Callable[[Any], float] | None, every_s: float) -> Any:
    from stable_baselines3.common.callbacks import BaseCallback

    class WallClockEval(BaseCallback):
        """Calls ``eval_fn`` at the start, every ``every_s`` s of training time, and at the end."""

        def __init__(self) -> None:
            super().__init__()
            self.curve: list[EvalPoint] = []
            self.eval_s = 0.0
            self.start = self.last = 0.0

        def train_s(self) -> float:
            return time.perf_counter() - self.start - self.eval_s

        def evaluate(self) -> None:
            if eval_fn is None:
                return
            begun, now = time.perf_counter(), self.train_s()
            value = float(eval_fn(self.model))
            self.eval_s += time.perf_counter() - begun
            self.curve.append(EvalPoint(now, int(self.num_timesteps), value))
            self.last = now

        def _on_training_start(self) -> None:
            self.start = time.perf_counter()
            self.evaluate()

        def _on_step(self) -> bool:
            if eval_fn is not None and self.train_s() - self.last >= every_s:
                self.evaluate()
            return True

        def _on_training_end(self) -> None:
            if not self.curve or self.curve[-1].timesteps != self.num_timesteps:
                self.evaluate()

    return WallClockEval()


def train_sb3(
    env_fn: Callable[[], gym.Env],
    total_timesteps: int,
    net_dims: Sequence[int] = (128, 64),
    lr: float = 2**-14,
    gamma: float = 0.99,
    gae_lambda: float = 0.95,
    batch_size: int = 2**10,
    n_epochs: int = 8,
    clip: float = 0.25,
    ent_coef: float = 0.02,
    n_steps: int = 2**12,
    seed: int = 0,
    eval_fn: Callable[[Any], float] | None = None,
    eval_every_s: float = 30.0,
    normalize_obs: bool = False,
) -> SB3Result:
    """Train SB3 PPO on one env (``DummyVecEnv``) with our PPO's hyperparameters.

    The settings follow ``trainers/ppo/ppo.py``: a buffer of ``n_steps`` = 2^12 transitions,
    minibatches of 2^10, 8 epochs, lr 2^-14, clip 0.25, entropy 0.02, value coefficient 0.5,
    gradient norm 0.5, GAE λ 0.95, initial log-std −0.5, separate Linear-ReLU MLPs of
    ``net_dims`` for the actor and the critic, and the CPU. One difference remains: our actor
    squashes its Gaussian sample with ``tanh``, while SB3 clips it to ``[-1, 1]``.

    FinRL's state is unscaled: cash is about 1e6 and prices about 1e2. From the first
    step, the untrained policy's mean is therefore hundreds or thousands of times larger
    than the clip bound, and every action is ±1. This is what FinRL does with SB3 as it
    ships, so it is the default. ``normalize_obs=True`` wraps the env in SB3's
    ``VecNormalize`` (running mean/std, observations only). :func:`finrl_account_values`
    applies the same statistics when it evaluates.

    ``eval_fn(model)`` runs at the start, after every ``eval_every_s`` seconds of training,
    and at the end. Time spent in it counts toward neither ``train_s`` nor samples/s. SB3
    rounds ``total_timesteps`` up to a whole number of rollouts.
    """
    import torch.nn as nn
    from stable_baselines3 import PPO
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    venv = DummyVecEnv([env_fn])
    env = VecNormalize(venv, norm_obs=True, norm_reward=False) if normalize_obs else venv
    model = PPO(
        "MlpPolicy", env, learning_rate=lr, n_steps=n_steps, batch_size=batch_size,
        n_epochs=n_epochs, gamma=gamma, gae_lambda=gae_lambda, clip_range=clip, ent_coef=ent_coef,
        vf_coef=0.5, max_grad_norm=0.5, seed=seed, device="cpu", verbose=0,
        policy_kwargs={"net_arch": {"pi": list(net_dims), "vf": list(net_dims)}, "activation_fn": nn.ReLU,
                       "log_std_init": -0.5},
    )
    model.set_logger(Logger(None, []))  # SB3's default logger leaves an empty SB3-<time> folder in /tmp
    callback = _eval_callback(eval_fn, eval_every_s)
    begun = time.perf_counter()
    model.learn(total_timesteps=total_timesteps, callback=callback, progress_bar=False)
    total = time.perf_counter() - begun
    train = total - callback.eval_s
    steps = int(model.num_timesteps)
    return SB3Result(model=model, timesteps=steps, train_s=train, total_s=total,
                     samples_per_s=steps / max(train, 1e-9), curve=callback.curve)


def finrl_account_values(model: Any, env: gym.Env) -> np.ndarray:
    """Run ``model`` deterministically through one episode of ``env`` and return the daily
    account values: the start, then one value per close after a trade. If the model was
    trained with ``VecNormalize``, its frozen statistics scale the observations."""
    norm = model.get_vec_normalize_env()
    obs, _ = env.reset()
    terminated = truncated = False
    while not (terminated or truncated):
        state = np.asarray(obs, dtype=np.float32)
        action, _ = model.predict(state if norm is None else norm.normalize_obs(state), deterministic=True)
        obs, _, terminated, truncated, _ = env.step(action)
    return np.asarray(env.asset_memory, dtype=np.float64)


def finrl_validation_sharpe(
    model: Any,
    val_frame: pd.DataFrame,
    n_stocks: int,
    indicator_names: Sequence[str],
    per_year: float = 252.0,
    **env_kwargs: Any,
) -> float:
    """Annualised Sharpe ratio of ``model`` on a FinRL env built on ``val_frame``.

    It uses ``trainers.common.metrics.sharpe``, the metric our side uses. To cover the same
    returns as our env's validation window, build ``val_frame`` from
    ``FeatureSet.window("validation")``, which starts one bar before the split.
    """
    env = make_finrl_env(val_frame, n_stocks, indicator_names, **env_kwargs)
    return sharpe(finrl_account_values(model, env), per_year)
