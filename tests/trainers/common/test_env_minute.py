"""The minute-bar MDP (docs/training.md, Minute bars: the MDP), by hand and against the scalar
reference: fills across the overnight gap, a half day, decisions at every session close, and
``env.overnight`` carry against flatten."""

import math

import numpy as np
import pytest
import torch

from tests.trainers.common.reference_env import ReferenceAccount
from trainers.common.env import MarketData, MarketEnv
from trainers.common.sessions import session_last
from trainers.common.state import StateScales
from trainers.config import SESSION_GRID, EnvConfig

F64 = torch.float64
SCALES = StateScales(1e-3, 0.1, (10.0, 20.0))
# two sessions of three bars: bar 2 is the first session's last (its close), bar 3 the next one's first open
OPEN = [[10.0, 20.0], [11.0, 21.0], [12.0, 22.0], [15.0, 18.0], [16.0, 19.0], [17.0, 20.0]]
CLOSE = [[10.5, 20.5], [11.5, 21.5], [12.5, 22.5], [15.5, 18.5], [16.5, 19.5], [17.5, 20.5]]
LAST = [False, False, True, False, False, False]


def toy(overnight: str, decide_every: int = 1) -> tuple[MarketEnv, ReferenceAccount]:
    """The 2-stock, 2-session toy from bar 1, and the scalar reference account beside it."""
    cfg = EnvConfig(initial_cash=1000.0, hmax=10, cost_pct=0.01, reward_scale=1.0, overnight=overnight,
                    decide_every=decide_every)
    data = MarketData(open=torch.tensor(OPEN, dtype=F64), close=torch.tensor(CLOSE, dtype=F64),
                      features=torch.zeros(6, 2, 1), session_last=torch.tensor(LAST))
    env = MarketEnv(data, SCALES, cfg, 1, (1, 5), random_start=False)
    env.reset()
    ref = ReferenceAccount(OPEN, CLOSE, cfg.hmax, cfg.cost_pct, cfg.reward_scale, cfg.initial_cash,
                           session_last=LAST, overnight=overnight)
    ref.reset(1)
    return env, ref


def decide(env: MarketEnv, ref: ReferenceAccount, action: list[float]) -> float:
    """One decision in both; they agree on the account. Returns the env's reward."""
    step = env.step(torch.tensor([action]))
    expected = ref.decide(action, env.cfg.decide_every, env.t_hi)
    assert env.shares[0].tolist() == expected.shares
    assert math.isclose(float(env.cash[0]), expected.cash, rel_tol=1e-12)
    assert math.isclose(float(step.reward[0]), expected.reward, rel_tol=1e-6)
    return float(step.reward[0])


def test_carry_fills_the_close_decision_at_the_next_sessions_open_and_holds_over_the_gap():
    env, ref = toy("carry")
    decide(env, ref, [1.0, 0.5])  # bar 1: buy 10 A, 5 B at bar 2's open (12, 22), 1% cost
    cash = 1000 - (10 * 12 + 5 * 22) * 1.01
    assert float(env.cash[0]) == pytest.approx(cash, abs=1e-9) and env.shares.tolist() == [[10.0, 5.0]]
    assert float(env.account_value()[0]) == pytest.approx(cash + 10 * 12.5 + 5 * 22.5, abs=1e-9)
    # bar 2 is the session's close: 10 more A fill at the next session's first open, 15, not at the
    # close 12.5; the holding bears the gap (A 12.5 -> 15, B 22.5 -> 18) into bar 3's close
    reward = decide(env, ref, [1.0, 0.0])
    cash -= 10 * 15 * 1.01
    assert float(env.cash[0]) == pytest.approx(cash, abs=1e-9) and env.shares.tolist() == [[20.0, 5.0]]
    assert reward == pytest.approx((cash + 20 * 15.5 + 5 * 18.5) - (1000 - 232.3 + 10 * 12.5 + 5 * 22.5), abs=1e-4)


def test_flatten_sells_at_the_session_close_and_holds_nothing_over_the_gap():
    env, ref = toy("flatten")
    reward = decide(env, ref, [1.0, 0.5])  # bought at bar 2's open, sold at bar 2's close, 1% each way
    cash = 1000 - (10 * 12 + 5 * 22) * 1.01 + (10 * 12.5 + 5 * 22.5) * 0.99
    assert cash == pytest.approx(1002.825)
    assert float(env.cash[0]) == pytest.approx(cash, abs=1e-9) and env.shares.tolist() == [[0.0, 0.0]]
    assert reward == pytest.approx(cash - 1000, abs=1e-4)
    state = env.observe()[0]  # the decision at that close sees the flat account
    assert state[:3].tolist() == pytest.approx([cash * 1e-3, 0.0, 0.0])
    decide(env, ref, [1.0, 1.0])  # ... and fills at the next session's first open (15, 18)
    assert float(env.cash[0]) == pytest.approx(cash - (10 * 15 + 10 * 18) * 1.01, abs=1e-9)
    assert env.shares.tolist() == [[10.0, 10.0]]
    decide(env, ref, [0.0, 0.0])  # bar 4 is no session's last: the position is carried within the session
    assert env.shares.tolist() == [[10.0, 10.0]]


def test_flatten_inside_a_held_decision_is_the_same_sale():
    env, ref = toy("flatten", decide_every=3)
    decide(env, ref, [1.0, 0.5])  # bars 1 -> 4: bought at 2's open, sold at 2's close, flat to bar 4
    assert float(env.cash[0]) == pytest.approx(1002.825, abs=1e-9) and int(env.t[0]) == 4


def minutes(day: str, first_utc: str, bars: int) -> np.ndarray:
    start = np.datetime64(f"{day}T{first_utc}", "ns")
    return start + np.arange(bars) * np.timedelta64(60, "s")


def three_sessions() -> np.ndarray:
    """UTC minute starts: a full session, the day-after-Thanksgiving half day (13:00 close), a full one."""
    return np.concatenate([minutes("2023-11-22", "14:30", 390), minutes("2023-11-24", "14:30", 210),
                           minutes("2023-11-27", "14:30", 390)])


def test_a_half_day_is_a_shorter_session():
    last = session_last(three_sessions())
    assert np.flatnonzero(last).tolist() == [389, 599]  # 15:59 and, on the half day, 12:59; the data's end is unknown


def decision_bars(k: int, data: MarketData, window: tuple[int, int]) -> list[int]:
    env = MarketEnv(data, SCALES, EnvConfig(decide_every=k, hmax=1), 1, window, random_start=False)
    env.reset()
    bars = []
    while int(env.t[0]) < window[1]:
        bars.append(int(env.t[0]))
        env.step(torch.zeros(1, 2))
    return bars


@pytest.mark.parametrize("k", [k for k in range(1, SESSION_GRID + 1) if SESSION_GRID % k == 0])
def test_a_grid_from_a_session_close_decides_at_every_close_when_decide_every_divides_30(k):
    last = torch.from_numpy(session_last(three_sessions()))
    price = torch.full((len(last), 2), 10.0, dtype=F64)
    data = MarketData(open=price, close=price, features=torch.zeros(len(last), 2, 1), session_last=last)
    # a backtest window starts at the bar before its split: the previous session's close
    bars = decision_bars(k, data, (389, len(last) - 1))
    assert {389, 599} <= set(bars)
    assert set(range(389, len(last) - 1, 30)) <= set(bars)  # ... and every 30 minutes after it


def test_decide_every_that_does_not_divide_30_misses_the_half_days_close():
    last = torch.from_numpy(session_last(three_sessions()))
    price = torch.full((len(last), 2), 10.0, dtype=F64)
    data = MarketData(open=price, close=price, features=torch.zeros(len(last), 2, 1), session_last=last)
    assert 599 not in decision_bars(13, data, (389, len(last) - 1))  # 13 divides 390, not 210
