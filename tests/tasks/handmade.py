"""Hand-made policies and feature sets whose every number is known, for tests of decisions.

An actor with zeroed weights and a chosen output bias acts the same on every state, so the
orders it gives, and the account values they lead to, can be worked out by hand.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import torch

from tasks.data.feature_set import FeatureSet
from tasks.model import bundle
from trainers.common.nets import Actor
from trainers.common.state import StateScales
from trainers.config import EnvConfig
from trainers.population.ensemble import Ensemble


def policy(symbols: list[str], feature_names: list[str], bias: list[float], env: EnvConfig,
           mean: list[list[float]] | None = None, std: list[list[float]] | None = None,
           price_ref: tuple[float, ...] | None = None, kind: str = "mlp") -> tuple[Actor, bundle.PolicyMeta]:
    """An actor whose action is ``tanh(bias)`` on any state, and its bundle constants
    (``kind: shared``: a per-stock scorer, whose one bias is ``bias[0]`` for every stock)."""
    n, k = len(symbols), len(feature_names)
    meta = bundle.PolicyMeta(
        symbols=symbols, feature_names=feature_names, mean=mean or [[0.0] * k] * n, std=std or [[1.0] * k] * n,
        scales=StateScales(1 / env.initial_cash, 1 / env.hmax, price_ref or (1.0,) * n), env=env, net_dims=[4],
        freq="1d", data_version="handmade", policy=kind)
    actor = meta.actor()
    with torch.no_grad():
        for p in actor.parameters():
            p.zero_()
        actor.net[-1].bias.copy_(torch.tensor(bias[: actor.net[-1].bias.numel()]))
    return actor, meta


def ensemble(symbols: list[str], feature_names: list[str], biases: list[list[float]], env: EnvConfig,
             **kwargs) -> tuple[Ensemble, bundle.PolicyMeta]:
    """An ensemble of :func:`policy` actors, member k acting ``tanh(biases[k])`` on any state,
    and its bundle constants (``kwargs``: :func:`policy`'s)."""
    members = [policy(symbols, feature_names, bias, env, **kwargs) for bias in biases]
    meta = replace(members[0][1], members=[{"algorithm": "ppo", "net_dims": [4], "fitness": float(-k), "job": k}
                                           for k in range(len(biases))])
    return Ensemble([actor for actor, _ in members], env.action), meta


def feature_set(opens: list[list[float]], closes: list[list[float]], dates: list[str],
                splits: dict[str, tuple[int, int]], symbols: list[str]) -> FeatureSet:
    """A daily feature set with one all-zero indicator (``rsi_30``) and the given prices."""
    t, n = len(dates), len(symbols)
    return FeatureSet(
        opens=np.asarray(opens, np.float64), prices=np.asarray(closes, np.float64),
        features=np.zeros((t, n, 1), np.float32), timestamps=pd.DatetimeIndex(dates).to_numpy(),
        symbols=symbols, feature_names=["rsi_30"], splits=splits, mean=np.zeros((n, 1)), std=np.ones((n, 1)),
        tradable=np.ones((t, n), bool))
