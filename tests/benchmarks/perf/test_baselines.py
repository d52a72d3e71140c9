"""The FinRL + SB3 baseline of the training benchmark (benchmarks/perf/baselines.py)."""

from __future__ import annotations

import importlib.util
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from benchmarks.perf import baselines
from trainers.common.metrics import sharpe

needs_finrl = pytest.mark.skipif(importlib.util.find_spec("finrl") is None,
                                 reason="finrl not installed (pip install --no-deps finrl==0.3.7)")
T, N, NAMES = 80, 3, ["ind_a", "ind_b"]
SYMBOLS = ["ZZZ", "BBB", "AAA"]  # deliberately unsorted


def panels(days: int = T, seed: int = 0) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    close = 100.0 * np.exp(np.cumsum(rng.normal(0.0, 0.01, (days, N)), axis=0))
    timestamps = (np.datetime64("2020-01-01") + np.arange(days)).astype("datetime64[ns]")
    return timestamps, close, {name: rng.normal(size=(days, N)) for name in NAMES}


def frame(days: int = T) -> tuple[pd.DataFrame, np.ndarray, dict[str, np.ndarray]]:
    timestamps, close, ind = panels(days)
    return baselines.finrl_frame(timestamps, SYMBOLS, close, ind), close, ind


def test_missing_finrl_gives_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(baselines, "_env_class", None)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(ImportError, match=r"^finrl is not installed: run `make install`"):
        baselines.load_finrl_env_class()


@needs_finrl
def test_env_class_loads_without_finrl_package_init() -> None:
    import gymnasium as gym

    cls = baselines.load_finrl_env_class()
    assert cls.__name__ == "StockTradingEnv" and issubclass(cls, gym.Env)
    assert "finrl" not in sys.modules  # finrl/__init__.py (heavy deps) never ran


def test_frame_layout() -> None:
    f, close, ind = frame()
    assert list(f.columns) == ["date", "tic", "close", "high", "low", "open", "volume", *NAMES]
    assert len(f) == T * N
    assert f.index.tolist() == np.repeat(np.arange(T), N).tolist()
    assert f.loc[5, "tic"].tolist() == ["AAA", "BBB", "ZZZ"]
    order = [2, 1, 0]  # sorted-symbol order of SYMBOLS
    np.testing.assert_array_equal(f.loc[5, "close"].to_numpy(), close[5, order])
    np.testing.assert_array_equal(f.loc[7, "ind_b"].to_numpy(), ind["ind_b"][7, order])
    assert (f.groupby(level=0)["date"].nunique() == 1).all()
    with pytest.raises(ValueError, match="clash"):
        baselines.finrl_frame(f["date"].unique(), SYMBOLS, close, {"close": close})


@needs_finrl
def test_env_state_fill_and_episode_length() -> None:
    f, close, ind = frame()
    env = baselines.make_finrl_env(f, N, NAMES, hmax=100, initial_amount=1_000_000, cost_pct=0.002)
    state, _ = env.reset()
    order = [2, 1, 0]
    assert len(state) == 1 + 2 * N + len(NAMES) * N
    np.testing.assert_allclose(state[1 : 1 + N], close[0, order])
    np.testing.assert_allclose(state[1 + 2 * N : 1 + 3 * N], ind["ind_a"][0, order])
    # A full buy fills 100 shares at the close the agent just saw, after 0.2% cost.
    state, reward, terminated, truncated, _ = env.step(np.ones(N, dtype=np.float32))
    assert list(state[1 + N : 1 + 2 * N]) == [100] * N and not terminated and not truncated
    cash = 1_000_000 - 100 * close[0, order].sum() * 1.002
    assert state[0] == pytest.approx(cash)
    assert reward == pytest.approx(1e-4 * (cash + 100 * close[1].sum() - 1_000_000))
    steps = 1
    while not terminated:
        _, _, terminated, _, _ = env.step(np.zeros(N, dtype=np.float32))
        steps += 1
    assert steps == T and len(env.asset_memory) == T  # T-1 trading days, then a terminal no-op


@needs_finrl
def test_step_rate_is_positive() -> None:
    f, _, _ = frame()
    assert baselines.step_rate(baselines.make_finrl_env(f, N, NAMES), seconds=0.2, seed=0) > 0


class BuyOnce:
    """A stand-in model: buy the most on the first day, then hold."""

    def get_vec_normalize_env(self) -> None:
        return None

    def predict(self, obs: np.ndarray, deterministic: bool) -> tuple[np.ndarray, None]:
        assert deterministic
        holding = obs[1 + N : 1 + 2 * N].sum() > 0
        return np.full(N, 0.0 if holding else 1.0, dtype=np.float32), None


@needs_finrl
def test_validation_sharpe_uses_daily_account_values() -> None:
    f, close, _ = frame(days=30)
    values = baselines.finrl_account_values(BuyOnce(), baselines.make_finrl_env(f, N, NAMES))
    cash = 1_000_000 - 100 * close[0].sum() * 1.002
    expected = np.concatenate([[1_000_000.0], cash + 100 * close[1:].sum(axis=1)])
    np.testing.assert_allclose(values, expected)
    got = baselines.finrl_validation_sharpe(BuyOnce(), f, N, NAMES, per_year=252.0)
    assert got == pytest.approx(sharpe(expected, 252.0)) and got != 0.0


@needs_finrl
@pytest.mark.parametrize("normalize_obs", [False, True])
def test_train_sb3_records_eval_curve_and_excludes_eval_time(
        normalize_obs: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("SB3_LOGDIR", raising=False)
    f, _, _ = frame()
    val, _, _ = frame(days=20)
    pause, calls = 0.05, []

    def eval_fn(model: object) -> float:
        calls.append(1)
        time.sleep(pause)
        return baselines.finrl_validation_sharpe(model, val, N, NAMES)

    result = baselines.train_sb3(lambda: baselines.make_finrl_env(f, N, NAMES), 512, net_dims=(16,),
                                 n_steps=128, batch_size=64, n_epochs=2, eval_fn=eval_fn, eval_every_s=0.1,
                                 normalize_obs=normalize_obs)
    assert result.timesteps == 512
    assert len(result.curve) == len(calls) >= 2  # at the start and at the end, at least
    assert result.curve[0].timesteps == 0 and result.curve[-1].timesteps == 512
    assert all(a.timesteps <= b.timesteps and a.train_s <= b.train_s for a, b in zip(result.curve, result.curve[1:]))
    assert all(np.isfinite(p.sharpe) for p in result.curve)
    assert result.total_s - result.train_s >= pause * len(calls)
    assert result.samples_per_s == pytest.approx(512 / result.train_s)
    assert (result.model.get_vec_normalize_env() is not None) == normalize_obs
    assert not list(tmp_path.glob("SB3-*"))  # no SB3-<time> log folder left in the temp dir
