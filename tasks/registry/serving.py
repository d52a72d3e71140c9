"""The MLflow pyfunc that serves a policy bundle (docs/design.md, registry and delivery).

The model carries its weights, indicator names, train-only normalisation stats, state
scales and env constants. :meth:`PolicyModel.predict` builds the state with
:func:`trainers.common.state.build_state` and turns actions into orders with
:func:`trainers.common.orders.orders`, the same functions the training environment uses,
so serving cannot drift from training.

Input: one row per symbol with ``symbol``, ``close``, ``shares``, ``cash`` (the account's
cash, repeated), optionally ``tradable`` (bool, default true: false where the symbol has no
tradable bar; it is masked from the state, never bought and sold if held, as in the env),
optionally ``decide`` (bool, default true: false on a bar between two decisions of a policy
with ``env.decide_every`` > 1, which then trades only the gate and close-outs), and
the raw indicator columns (NaN allowed where not tradable). Output: ``symbol``, ``action`` in (-1, 1)
and ``order_qty``: signed whole shares (negative sells, positive buys) as the env asks for
them at the next open, sells capped at the holdings. Buys are not yet scaled to the cash:
the broker fills the bar's orders as one batch at the open, scaling the buys there with
:func:`trainers.common.orders.fill_orders` exactly as the env does (it cannot be done at the close,
before the open's prices are known).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlflow.pyfunc
import numpy as np
import pandas as pd
import torch

from tasks.errors import DataError
from tasks.model import bundle
from trainers.common.orders import held_orders, orders
from trainers.common.state import build_state
from trainers.config import TURBULENCE


def policy_input(
    meta: bundle.PolicyMeta, close: np.ndarray, raw_features: np.ndarray, shares: np.ndarray, cash: float,
    tradable: np.ndarray | None = None, decide: bool = True,
) -> pd.DataFrame:
    """The pyfunc's input frame for one account at one bar (``tradable``: the feature set's
    mask row, all true when omitted; ``decide`` false: a bar between two decisions of a
    policy that holds them for ``env.decide_every`` bars)."""
    frame = pd.DataFrame(raw_features.astype(np.float64), columns=meta.feature_names)
    frame.insert(0, "symbol", meta.symbols)
    frame.insert(1, "close", close.astype(np.float64))
    frame.insert(2, "shares", shares.astype(np.float64))
    frame.insert(3, "cash", float(cash))
    frame.insert(4, "tradable", np.ones(len(meta.symbols), bool) if tradable is None else np.asarray(tradable, bool))
    frame.insert(5, "decide", bool(decide))
    return frame


def turbulence_gate(meta: bundle.PolicyMeta, raw: np.ndarray) -> torch.Tensor | None:
    """The env's turbulence gate for one account: liquidate when the bar's raw turbulence
    index reaches ``env.turbulence_threshold`` (``None`` when the gate is off)."""
    threshold = meta.env.turbulence_threshold
    if threshold is None:
        return None
    level = float(raw[0, meta.feature_names.index(TURBULENCE)])
    return torch.tensor([level >= threshold])


def decide(actor: torch.nn.Module, meta: bundle.PolicyMeta, frame: pd.DataFrame) -> pd.DataFrame:
    """Action and the whole-share orders it asks for, for the account described by ``frame``.
    On a held bar (``decide`` false) the policy is not asked: the action is 0 and the orders
    are the env's for a bar between decisions (:func:`trainers.common.orders.held_orders`)."""
    missing = sorted(set(meta.symbols) - set(frame["symbol"]))
    if missing:
        raise DataError(f"policy input: no row for symbol(s) {', '.join(missing[:5])}")
    rows = frame.set_index("symbol").loc[meta.symbols]
    raw = rows[meta.feature_names].to_numpy(np.float64)
    close = torch.as_tensor(rows["close"].to_numpy(np.float64)).unsqueeze(0)
    shares = torch.as_tensor(rows["shares"].to_numpy(np.float64)).unsqueeze(0)
    cash = torch.as_tensor([float(rows["cash"].iloc[0])], dtype=torch.float64)
    feats = torch.as_tensor(meta.normalise(raw)).unsqueeze(0)
    live = rows["tradable"].to_numpy(bool) if "tradable" in rows else np.ones(len(rows), bool)
    bad = ~np.isfinite(raw) & live[:, None]
    if bad.any():
        j, i = (int(a[0]) for a in np.nonzero(bad))
        raise DataError(f"policy input: {meta.feature_names[i]} is NaN/inf for tradable symbol {meta.symbols[j]}")
    mask = None if live.all() else torch.as_tensor(live).unsqueeze(0)
    if "decide" in rows and not bool(rows["decide"].iloc[0]):  # held: only the gate and close-outs trade
        action = torch.zeros_like(close, dtype=torch.float32)
        sold, bought = held_orders(shares, turbulence_gate(meta, raw), mask)
    else:
        with torch.no_grad():
            action = actor(build_state(cash, shares, close, feats, meta.scales, mask))
        sold, bought = orders(meta.env, action, cash, shares, close, turbulence_gate(meta, raw), mask)
    qty = (bought - sold)[0].numpy()
    return pd.DataFrame({"symbol": meta.symbols, "action": action[0].numpy().astype(np.float64),
                         "order_qty": qty.astype(np.int64)})


class PolicyModel(mlflow.pyfunc.PythonModel):
    """pyfunc wrapper around a policy bundle (logged by the register stage)."""

    def load_context(self, context: Any) -> None:
        self.actor, self.meta = bundle.load(Path(context.artifacts["bundle"]))

    def predict(self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> pd.DataFrame:
        return decide(self.actor, self.meta, model_input)
