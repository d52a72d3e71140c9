"""Property tests: the batched env matches the scalar reference step by step (hypothesis)."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from tests.trainers.common.reference_env import ReferenceAccount
from trainers.common.env import MarketData, MarketEnv
from trainers.common.state import StateScales
from trainers.config import EnvConfig


def make_market(seed: int, t: int, n: int, k: int, ragged: bool = False, sessions: bool = False) -> MarketData:
    """Random bars; ``ragged``: each stock lists late, stops early or misses bars at random
    (about a third of its cells untradable); ``sessions``: intraday-like bars, a quarter of
    them a session's last."""
    rng = np.random.default_rng(seed)
    close = 5 + 300 * rng.random((t, n)) * np.exp(np.cumsum(rng.normal(0, 0.05, (t, n)), axis=0))
    open_ = close * np.exp(rng.normal(0, 0.02, (t, n)))
    return MarketData(
        open=torch.tensor(open_), close=torch.tensor(close),
        features=torch.tensor(rng.normal(0, 1, (t, n, k)), dtype=torch.float32),
        turbulence=torch.tensor(rng.chisquare(n, t)),
        tradable=torch.tensor(rng.random((t, n)) > 0.33) if ragged else None,
        session_last=torch.tensor(rng.random(t) < 0.25) if sessions else None,
    )


def ref_state(acct: ReferenceAccount, data: MarketData, scales: StateScales) -> list[float]:
    t, n = acct.t, data.n_stocks
    close = [c / p if acct.can(t, i) else 0.0 for i, (c, p) in enumerate(zip(data.close[t].tolist(), scales.price_ref))]
    feats = [x if acct.can(t, i) else 0.0 for i in range(n) for x in data.features[t, i].tolist()]
    return [acct.cash * scales.cash_scale] + [q * scales.shares_scale for q in acct.shares] + close + feats


def check_state(row: torch.Tensor, acct: ReferenceAccount, data: MarketData, scales: StateScales) -> None:
    expected = torch.tensor(ref_state(acct, data, scales), dtype=torch.float32)
    torch.testing.assert_close(row.cpu(), expected, rtol=1e-6, atol=1e-6)


@st.composite
def scenarios(draw):
    n = draw(st.integers(1, 4))
    e = draw(st.integers(1, 4))
    steps = draw(st.integers(1, 25))
    actions = draw(arrays(np.float32, (steps, e, n), elements=st.floats(-1.25, 1.25, width=32)))
    cfg = EnvConfig(
        initial_cash=draw(st.sampled_from([50.0, 2_000.0, 1e6])),
        hmax=draw(st.integers(1, 30)),
        cost_pct=draw(st.sampled_from([0.0, 0.002, 0.01])),
        reward_scale=1e-3,
        min_episode_len=1,
        episode_len=draw(st.integers(1, 6)),
        turbulence_threshold=draw(st.sampled_from([None, 2.0, 4.0])),
        action=draw(st.sampled_from(["shares", "weights"])),
        reward=draw(st.sampled_from(["value", "log", "excess"])),
        decide_every=draw(st.sampled_from([1, 1, 2, 3])),
        overnight=draw(st.sampled_from(["carry", "flatten"])),
    )
    return draw(st.integers(0, 2**16)), n, e, actions, cfg, draw(st.booleans()), draw(st.booleans()), \
        draw(st.booleans())


@settings(deadline=None)
@given(scenarios())
def test_batched_env_matches_the_scalar_reference(scenario):
    check_against_reference(scenario, "cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@settings(deadline=None, max_examples=40)
@given(scenarios())
def test_the_cuda_env_matches_the_scalar_reference(scenario):
    """The static step on CUDA (no host reads, its capacity of final states) fills as the reference does."""
    check_against_reference(scenario, "cuda")


def check_against_reference(scenario: tuple, device: str) -> None:
    seed, n, e, actions, cfg, random_start, ragged, sessions = scenario
    data = make_market(seed, t=30, n=n, k=2, ragged=ragged, sessions=sessions)
    scales = StateScales(1 / cfg.initial_cash, 1 / cfg.hmax, tuple(data.close[0].tolist()))
    data = data.to(device)
    env = MarketEnv(data, scales, cfg, e, (0, 29), random_start=random_start, seed=seed)
    state = env.reset()
    accounts = []
    for i in range(e):
        acct = ReferenceAccount(data.open.tolist(), data.close.tolist(), cfg.hmax, cfg.cost_pct,
                                cfg.reward_scale, cfg.initial_cash, data.turbulence.tolist(),
                                cfg.turbulence_threshold, cfg.action, cfg.reward,
                                None if data.tradable is None else data.tradable.tolist(),
                                None if data.session_last is None else data.session_last.tolist(), cfg.overnight)
        acct.reset(int(env.t[i]))
        check_state(state[i], acct, data, scales)
        accounts.append(acct)
    ends = env.t_end.tolist()
    for action in actions:
        if not random_start and accounts[0].t >= 29:
            break
        step = env.step(torch.from_numpy(action).to(device))
        state, reward, truncated, final = step.state, step.reward, step.truncated, step.last_states()
        for i, acct in enumerate(accounts):
            ref = acct.decide(action[i].tolist(), cfg.decide_every, ends[i])
            if ref.near_boundary:
                return  # a last-bit rounding tie: the two may legitimately part ways here
            assert env_shares(final, i, n, cfg) == ref.shares
            assert math.isclose(float(reward[i]), ref.reward, rel_tol=1e-6, abs_tol=1e-9)  # reward is float32
            assert bool(truncated[i]) == (acct.t >= ends[i])
            check_state(final[i], acct, data, scales)
            if truncated[i] and random_start:
                acct.reset(int(env.t[i]))  # the env drew a new episode; follow it
                ends[i] = int(env.t_end[i])
            check_state(state[i], acct, data, scales)


def env_shares(final: torch.Tensor, i: int, n: int, cfg: EnvConfig) -> list[float]:
    """Share counts read back from a state row (they are scaled by 1 / hmax)."""
    return [round(float(x) * cfg.hmax) for x in final[i, 1 : 1 + n]]
