"""The pyfunc's decisions on a hand-made bundle: orders, the turbulence gate, input checks.

The actor's weights are zeroed and its output bias set, so its action is known exactly:
tanh(3) ≈ 0.995 buys trunc(0.995 · hmax) = 9 shares, tanh(-3) sells 9.
"""

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from tasks.errors import DataError
from tasks.model import bundle
from tasks.registry.serving import PolicyModel, decide, policy_input, turbulence_gate
from tests.tasks.handmade import ensemble, policy
from trainers.common.nets import Actor
from trainers.common.orders import WEIGHT_LOGITS, fill_orders, orders
from trainers.common.state import build_state
from trainers.config import EnvConfig
from trainers.population.ensemble import Ensemble

SYMBOLS, CLOSE = ["AAA", "BBB"], np.array([10.0, 20.0])


def make(bias: tuple[float, float] = (3.0, -3.0), threshold: float | None = 5.0) -> tuple[Actor, bundle.PolicyMeta]:
    env = EnvConfig(initial_cash=1_000.0, hmax=10, cost_pct=0.01, turbulence_threshold=threshold)
    return policy(SYMBOLS, ["rsi_30", "turbulence"], list(bias), env, mean=[[50.0, 0.0]] * 2, std=[[10.0, 1.0]] * 2,
                  price_ref=(10.0, 20.0))


def frame(meta: bundle.PolicyMeta, turbulence: float, shares=(0.0, 5.0), cash: float = 1_000.0) -> pd.DataFrame:
    raw = np.array([[55.0, turbulence], [45.0, turbulence]])
    return policy_input(meta, CLOSE, raw, np.array(shares), cash)


def test_policy_input_has_one_row_per_symbol_with_the_account():
    _, meta = make()
    got = frame(meta, 1.0)
    assert list(got.columns) == ["symbol", "close", "shares", "cash", "tradable", "decide", "rsi_30", "turbulence"]
    assert got.to_dict("list") == {"symbol": SYMBOLS, "close": [10.0, 20.0], "shares": [0.0, 5.0],
                                   "cash": [1_000.0, 1_000.0], "tradable": [True, True], "decide": [True, True],
                                   "rsi_30": [55.0, 45.0], "turbulence": [1.0, 1.0]}


def test_an_untradable_symbol_is_masked_never_bought_and_sold_if_held():
    """Both actions buy 9 (tanh 3 · hmax 10). Untradable, BBB's 5 shares are sold instead of
    bought to; untradable, AAA is not bought. NaN indicators are allowed where there is no bar."""
    actor, meta = make(bias=(3.0, 3.0), threshold=None)
    raw = np.array([[55.0, 1.0], [np.nan, 1.0]])
    rows = policy_input(meta, CLOSE, raw, np.array([0.0, 5.0]), 1_000.0, tradable=np.array([True, False]))
    assert decide(actor, meta, rows)["order_qty"].tolist() == [9, -5]
    rows = policy_input(meta, CLOSE, raw[::-1].copy(), np.array([0.0, 5.0]), 1_000.0,
                        tradable=np.array([False, True]))
    assert decide(actor, meta, rows)["order_qty"].tolist() == [0, 9]
    with pytest.raises(DataError, match=r"^policy input: rsi_30 is NaN/inf for tradable symbol AAA$"):
        decide(actor, meta, policy_input(meta, CLOSE, raw[::-1].copy(), np.zeros(2), 1_000.0))


def test_a_held_bar_trades_only_the_gate_and_close_outs():
    """``decide`` false (env.decide_every > 1, between decisions): the actions (buy 9 AAA, sell
    5 BBB on a calm bar) are not asked for; the gate still sells, and so does an untradable BBB."""
    actor, meta = make()
    raw = np.array([[55.0, 1.0], [45.0, 1.0]])
    held = policy_input(meta, CLOSE, raw, np.array([0.0, 5.0]), 1_000.0, decide=False)
    out = decide(actor, meta, held)
    assert out["order_qty"].tolist() == [0, 0] and out["action"].tolist() == [0.0, 0.0]
    assert decide(actor, meta, policy_input(meta, CLOSE, raw + [0.0, 9.0], np.array([3.0, 5.0]), 1_000.0,
                                            decide=False))["order_qty"].tolist() == [-3, -5]
    halted = policy_input(meta, CLOSE, raw, np.array([3.0, 5.0]), 1_000.0, tradable=np.array([True, False]),
                          decide=False)
    assert decide(actor, meta, halted)["order_qty"].tolist() == [0, -5]


def test_serving_with_a_mask_builds_the_env_state():
    """The state the pyfunc feeds its actor is the env's state row for the same bar, mask included."""
    actor, meta = make(threshold=None)
    seen = []
    raw = np.array([[55.0, 1.0], [np.nan, 1.0]])
    rows = policy_input(meta, CLOSE, raw, np.array([0.0, 0.0]), 1_000.0, tradable=np.array([True, False]))
    decide(lambda state: seen.append(state) or torch.zeros(1, 2), meta, rows)
    expected = [1_000.0 * meta.scales.cash_scale, 0.0, 0.0, 1.0, 0.0, 0.5, 1.0, 0.0, 0.0]
    torch.testing.assert_close(seen[0][0], torch.tensor(expected, dtype=torch.float32))


def test_calm_bar_buys_and_sells_by_the_actions():
    actor, meta = make()
    out = decide(actor, meta, frame(meta, 4.9))
    assert out["symbol"].tolist() == SYMBOLS
    np.testing.assert_allclose(out["action"], np.tanh([3.0, -3.0]), rtol=1e-6)
    assert out["order_qty"].tolist() == [9, -5]  # the sell is capped by the 5 shares held


@pytest.mark.parametrize("turbulence", [5.0, 50.0])
def test_turbulence_at_or_above_the_threshold_liquidates_and_blocks_buys(turbulence):
    actor, meta = make()
    assert decide(actor, meta, frame(meta, turbulence))["order_qty"].tolist() == [0, -5]
    assert turbulence_gate(meta, np.array([[0.0, turbulence]])).tolist() == [True]


def test_the_gate_reads_the_turbulence_column_against_the_threshold():
    _, meta = make()
    assert turbulence_gate(meta, np.array([[5.0 + 1e-9, 5.0 - 1e-9]])).tolist() == [False]
    assert turbulence_gate(meta, np.array([[0.0, 5.0]])).tolist() == [True]


def test_no_gate_without_a_threshold():
    actor, meta = make(threshold=None)
    assert turbulence_gate(meta, np.array([[0.0, 1e9]])) is None
    assert decide(actor, meta, frame(meta, 1e9))["order_qty"].tolist() == [9, -5]


def test_buys_are_asked_for_whole_and_scaled_to_the_cash_only_at_the_fill():
    """The pyfunc cannot know the next open, so it asks for the env's wanted shares; the fill
    at the open scales the buys to the cash there, as the env does."""
    actor, meta = make(bias=(3.0, 3.0))
    out = decide(actor, meta, frame(meta, 0.0, shares=(0.0, 0.0), cash=136.35))
    assert out["order_qty"].tolist() == [9, 9]
    # 9 + 9 shares at opens of 10 and 20 cost (90 + 180) · 1.01 = 272.7; with 136.35 each buy is halved: 4, 4
    fill = fill_orders(torch.zeros(1, 2, dtype=torch.float64), torch.tensor([[9.0, 9.0]], dtype=torch.float64),
                       torch.tensor([136.35], dtype=torch.float64), torch.zeros(1, 2, dtype=torch.float64),
                       torch.tensor([[10.0, 20.0]], dtype=torch.float64), meta.env.cost_pct)
    assert fill.bought.tolist() == [[4.0, 4.0]]


def test_rows_may_come_in_any_order_but_every_symbol_is_needed():
    actor, meta = make()
    rows = frame(meta, 1.0)
    assert decide(actor, meta, rows.iloc[::-1])["order_qty"].tolist() == [9, -5]
    with pytest.raises(DataError, match=r"^policy input: no row for symbol\(s\) AAA$"):
        decide(actor, meta, rows.iloc[1:])
    with pytest.raises(DataError, match=r"^policy input: no row for symbol\(s\) AAA, BBB$"):
        decide(actor, meta, rows.iloc[:0])


def test_the_state_uses_the_saved_normalisation():
    """An actor reading only AAA's rsi: (55 - 50) / 10 = 0.5 gives tanh(0.5·w)."""
    actor, meta = make(bias=(0.0, 0.0), threshold=None)
    column = 1 + 2 * 2  # after cash, 2 shares and 2 prices: AAA's first indicator
    with torch.no_grad():
        actor.net[0].weight[0, column] = 2.0
        actor.net[0].bias[0] = 0.0
        actor.net[-1].weight[0, 0] = 1.0
    out = decide(actor, meta, frame(meta, 0.0))
    assert out["action"].iloc[0] == pytest.approx(np.tanh(1.0), rel=1e-6)


def test_the_pyfunc_loads_its_bundle_and_decides(tmp_path):
    actor, meta = make()
    bundle.save(tmp_path, actor.state_dict(), meta)
    model = PolicyModel()
    model.load_context(SimpleNamespace(artifacts={"bundle": str(tmp_path)}))
    assert model.meta == meta
    assert model.predict(None, frame(meta, 5.0))["order_qty"].tolist() == [0, -5]


def test_integer_columns_decide_as_their_float_values():
    """A caller's frame may carry shares, cash and prices as integers (JSON, CSV)."""
    actor, meta = make()
    floats = frame(meta, 4.9, shares=(0.0, 5.0), cash=1_000.0)
    ints = floats.astype({"close": "int64", "shares": "int64", "cash": "int64", "rsi_30": "int64"})
    pd.testing.assert_frame_equal(decide(actor, meta, ints), decide(actor, meta, floats))
    assert decide(actor, meta, ints)["action"].dtype == np.float64


def test_a_shared_scorer_with_target_weights_serves_the_env_orders(tmp_path):
    """Zero scores: a third each to AAA, BBB and cash. Value 1000 + 5·20 = 1100, so the
    targets are floor(366.7 / 10) = 36 and floor(366.7 / 20) = 18 shares: buy 36 and 13.
    The bundle saved and loaded gives the same orders (the policy kind travels with it)."""
    env = EnvConfig(initial_cash=1_000.0, hmax=10, cost_pct=0.01, action="weights")
    actor, meta = policy(SYMBOLS, ["rsi_30", "turbulence"], [0.0], env, mean=[[50.0, 0.0]] * 2,
                         std=[[10.0, 1.0]] * 2, price_ref=(10.0, 20.0), kind="shared")
    assert decide(actor, meta, frame(meta, 1.0))["order_qty"].tolist() == [36, 13]
    bundle.save(tmp_path, actor.state_dict(), meta)
    loaded, loaded_meta = bundle.load(tmp_path)
    assert loaded_meta.policy == "shared" and loaded.layout is not None
    assert decide(loaded, loaded_meta, frame(meta, 1.0))["order_qty"].tolist() == [36, 13]


def test_the_no_trade_band_travels_with_the_bundle(tmp_path):
    """The same account with env.rebalance_band 0.3: buying 13 BBB is 260 of 1100 (23.6%),
    under the band, so it is not sent; buying 36 AAA is 360 (32.7%) and is."""
    env = EnvConfig(initial_cash=1_000.0, hmax=10, cost_pct=0.01, action="weights", rebalance_band=0.3)
    actor, meta = policy(SYMBOLS, ["rsi_30", "turbulence"], [0.0], env, mean=[[50.0, 0.0]] * 2,
                         std=[[10.0, 1.0]] * 2, price_ref=(10.0, 20.0), kind="shared")
    assert decide(actor, meta, frame(meta, 1.0))["order_qty"].tolist() == [36, 0]
    bundle.save(tmp_path, actor.state_dict(), meta)
    loaded, loaded_meta = bundle.load(tmp_path)
    assert loaded_meta.env.rebalance_band == 0.3
    assert decide(loaded, loaded_meta, frame(meta, 1.0))["order_qty"].tolist() == [36, 0]


def make_ensemble(action: str, biases: list[list[float]]) -> tuple[Ensemble, bundle.PolicyMeta]:
    env = EnvConfig(initial_cash=1_000.0, hmax=10, cost_pct=0.01, turbulence_threshold=5.0, action=action)
    return ensemble(SYMBOLS, ["rsi_30", "turbulence"], biases, env, mean=[[50.0, 0.0]] * 2, std=[[10.0, 1.0]] * 2,
                    price_ref=(10.0, 20.0))


def env_orders(ens: Ensemble, meta: bundle.PolicyMeta, shares, cash: float) -> list[int]:
    """The orders :func:`trainers.common.orders.orders` gives for the ensemble's action on the
    state the env would build for ``frame``'s account (AAA's rsi 55, BBB's 45, calm)."""
    close = torch.as_tensor(CLOSE).unsqueeze(0)
    held = torch.tensor([shares], dtype=torch.float64)
    money = torch.tensor([cash], dtype=torch.float64)
    feats = torch.as_tensor(meta.normalise(np.array([[55.0, 1.0], [45.0, 1.0]]))).unsqueeze(0)
    with torch.no_grad():
        action = ens(build_state(money, held, close, feats, meta.scales))
    sold, bought = orders(meta.env, action, money, held, close)
    return (bought - sold)[0].long().tolist()


def test_an_ensemble_bundle_serves_the_orders_of_its_mean_allocation(tmp_path):
    """Members allocating (1/3, 1/3, 1/3) and (4/7, 2/7, 1/7) to AAA, BBB and cash average to
    (19, 13, 10) / 42. The account is worth 10,000 + 5 · 20 = 10,100: targets
    floor(19/42 · 10100 / 10) = floor(456.9) = 456 AAA and floor(13/42 · 10100 / 20) = floor(156.3)
    = 156 BBB, so buy 456 and 151. (Either member alone asks for 336 and 163, or 577 and 139;
    the mean action (ln 4, ln 2) / 10 would ask for 457 and 156.) Saved and loaded through
    the pyfunc, the bundle gives the same orders."""
    member_1 = [float(np.arctanh(np.log(4.0) / WEIGHT_LOGITS)), float(np.arctanh(np.log(2.0) / WEIGHT_LOGITS))]
    ens, meta = make_ensemble("weights", [[0.0, 0.0], member_1])
    rows = frame(meta, 1.0, cash=10_000.0)
    assert decide(ens, meta, rows)["order_qty"].tolist() == [456, 151] == env_orders(ens, meta, (0.0, 5.0), 10_000.0)
    bundle.save(tmp_path, ens.state_dict(), meta)
    model = PolicyModel()
    model.load_context(SimpleNamespace(artifacts={"bundle": str(tmp_path)}))
    assert isinstance(model.actor, Ensemble) and model.meta == meta
    out = model.predict(None, rows)
    assert out["order_qty"].tolist() == [456, 151]
    np.testing.assert_allclose(out["action"], np.log([1.9, 1.3]) / WEIGHT_LOGITS, atol=1e-6)


def test_a_shares_ensemble_bundle_serves_the_orders_of_its_mean_action(tmp_path):
    """Members acting (tanh 3, tanh -3) and (tanh 1, tanh 1) average to (0.878, -0.117):
    trunc(8.78) = buy 8 AAA and trunc(-1.17) = sell 1 BBB (the first member alone: 9, -5)."""
    ens, meta = make_ensemble("shares", [[3.0, -3.0], [1.0, 1.0]])
    assert decide(ens, meta, frame(meta, 1.0))["order_qty"].tolist() == [8, -1] == env_orders(ens, meta, (0.0, 5.0),
                                                                                             1_000.0)
    bundle.save(tmp_path, ens.state_dict(), meta)
    loaded, loaded_meta = bundle.load(tmp_path)
    assert decide(loaded, loaded_meta, frame(meta, 1.0))["order_qty"].tolist() == [8, -1]
    assert decide(loaded, loaded_meta, frame(meta, 5.0))["order_qty"].tolist() == [0, -5]  # the gate still liquidates
