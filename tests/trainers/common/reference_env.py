"""A slow, scalar, plain-Python statement of the MDP (docs/design.md, The market MDP), to check the batched env.

One account, one stock at a time, floats and loops, written from the rules rather than
from trainers/common/env.py: fill at the next bar's open, sells before buys, whole shares, cash
never below zero, ``cost_pct`` on every traded notional, reward = change of account value
from close to close, optional turbulence gate (block buys, sell everything), and a ragged
universe: a stock not tradable at t is never bought and is sold if held (and has no weight
in a target allocation); one not tradable at t+1 is not bought and is sold at its last real
close. An action may be held for several bars (``decide``). Intraday bars: with
``overnight="flatten"``, arriving at a session's last bar (``session_last``) sells every
holding at that bar's close, with costs, before the decision taken there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class RefStep:
    cash: float
    shares: list[float]
    reward: float
    cost: float
    near_boundary: bool
    """True when a scaled-down buy landed within 1e-9 of a whole share, so a last-bit
    difference in summation order may round it the other way in the batched env."""


@dataclass
class ReferenceAccount:
    """One trading account following the MDP rules, bar by bar."""

    opens: list[list[float]]
    closes: list[list[float]]
    hmax: int
    cost_pct: float
    reward_scale: float
    initial_cash: float
    turbulence: list[float] | None = None
    threshold: float | None = None
    action_kind: str = "shares"
    reward_kind: str = "value"
    tradable: list[list[bool]] | None = None
    session_last: list[bool] | None = None
    overnight: str = "carry"
    t: int = 0
    cash: float = 0.0
    shares: list[float] = field(default_factory=list)

    def reset(self, t: int) -> None:
        self.t, self.cash = t, self.initial_cash
        self.shares = [0.0] * len(self.closes[0])

    def value(self, t: int) -> float:
        return self.cash + sum(q * p for q, p in zip(self.shares, self.closes[t]))

    def can(self, t: int, i: int) -> bool:
        return self.tradable is None or self.tradable[t][i]

    def last_real_close(self, t: int, i: int) -> float:
        """(Only a held stock is sold at it, and a stock is held only after a tradable bar.)"""
        return next((self.closes[s][i] for s in range(t, -1, -1) if self.can(s, i)), math.nan)

    def decide(self, action: list[float], every: int, end: int) -> RefStep:
        """One decision (``env.decide_every``): ``action`` trades at bar t, then the account
        holds, trading nothing but the gate and close-outs, until bar t + every or ``end``;
        the reward is the sum of the bars' rewards."""
        stop = min(self.t + every, end)
        step = self.step(action)
        while self.t < stop:
            held = self.step(None, len(action))
            step = RefStep(held.cash, held.shares, step.reward + held.reward, step.cost + held.cost,
                           step.near_boundary)
        return step

    def sell_at_close(self) -> float:
        """Sell every holding at the current bar's close (a market-on-close order); the cost."""
        cost = 0.0
        for i, q in enumerate(self.shares):
            if q > 0:
                notional = q * self.closes[self.t][i]
                self.cash += notional - notional * self.cost_pct
                cost += notional * self.cost_pct
                self.shares[i] = 0.0
        return cost

    def step(self, action: list[float] | None, n_stocks: int = 0) -> RefStep:
        """One bar; a ``None`` action (a held bar) orders nothing."""
        n = n_stocks if action is None else len(action)
        t = self.t
        before = self.value(t)
        price = [self.opens[t + 1][i] if self.can(t + 1, i) else self.last_real_close(t, i) for i in range(n)]
        gated = self.threshold is not None and self.turbulence is not None \
            and self.turbulence[self.t] >= self.threshold
        near = False
        if action is None:
            orders = [0] * n
        elif self.action_kind == "weights":  # target weights: softmax(5a, 0) over stocks and cash
            exps = [math.exp(5.0 * a) if self.can(t, i) else 0.0 for i, a in enumerate(action)] + [1.0]
            targets = [e / sum(exps) * before / c for e, c in zip(exps, self.closes[t])]
            near = any(abs(x - round(x)) < 1e-9 for x in targets)
            orders = [math.floor(x) - q for x, q in zip(targets, self.shares)]
        else:
            orders = [math.trunc(max(-1.0, min(1.0, a)) * self.hmax) for a in action]
        closed = [not (self.can(t, i) and self.can(t + 1, i)) for i in range(n)]
        orders = [-self.shares[i] if closed[i] else o for i, o in enumerate(orders)]
        cost = 0.0
        # 1. sells, never more than held
        for i in range(n):
            sell = self.shares[i] if gated or closed[i] else min(float(max(-orders[i], 0)), self.shares[i])
            if sell > 0:
                notional = sell * price[i]
                self.cash += notional - notional * self.cost_pct
                cost += notional * self.cost_pct
                self.shares[i] -= sell
        # 2. buys, scaled down together when the cash (after costs) cannot pay for them all
        wanted = [0.0 if gated else float(max(o, 0)) for o in orders]
        need = sum(w * p for w, p in zip(wanted, price) if w > 0) * (1.0 + self.cost_pct)  # (p: NaN if never real)
        ratio = self.cash / need if need > self.cash else 1.0
        for i in range(n):
            exact = wanted[i] * ratio
            near = near or (ratio < 1.0 and abs(exact - round(exact)) < 1e-9 and exact > 0)
            buy = float(math.floor(exact))
            if buy > 0:
                notional = buy * price[i]
                self.cash -= notional * (1.0 + self.cost_pct)
                cost += notional * self.cost_pct
                self.shares[i] += buy
        self.cash = max(self.cash, 0.0)
        self.t += 1
        if self.overnight == "flatten" and self.session_last is not None and self.session_last[self.t]:
            cost += self.sell_at_close()
        if self.reward_kind in ("log", "excess"):
            growth = math.log(self.value(self.t) / before)
            if self.reward_kind == "excess":  # minus the equal-weight market's log growth (tradable stocks)
                ratios = [b / a for i, (a, b) in enumerate(zip(self.closes[t], self.closes[t + 1]))
                          if self.can(t, i) and self.can(t + 1, i)]
                growth -= math.log(sum(ratios) / len(ratios)) if ratios else 0.0
            reward = growth * self.initial_cash * self.reward_scale
        else:
            reward = (self.value(self.t) - before) * self.reward_scale
        return RefStep(self.cash, list(self.shares), reward, cost, near)
