"""Deterministic episodes over a fixed window: the evaluator's fitness runs and the backtest.

Both run through :class:`trainers.common.env.MarketEnv`, so they apply exactly the training
MDP: next-bar-open fills, sells before buys, integer shares, cash ≥ 0 and costs.

A window's pass is a chain of decisions, each waiting for the last: a validation year of
minute bars is about 19,656 of them. The evaluator may cut the window into ``chunks``
stretches traded side by side as more accounts (:func:`chunk_plan`): each later stretch's
account starts flat ``warmup`` bars or more before the stretch, so that by its first scored
bar it holds what the policy's own decisions lead to, and only the stretch's returns are
kept. The chain is then ``chunks`` times shorter. The fitness is not bit for bit the single
pass's: how far it moves is measured in docs/evolution.md (parallel evaluation).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from trainers import profiler
from trainers.common.capture import Recorded, capturing
from trainers.common.env import MarketData, MarketEnv
from trainers.common.orders import Fill, fill_next
from trainers.common.state import StateScales
from trainers.config import CompileMode, EnvConfig

Policy = Callable[[torch.Tensor], torch.Tensor]
"""Deterministic actions ``[E, A]`` in (-1, 1) for states ``[E, state_dim]`` (an Actor is one)."""


WARMUP = 250
"""Bars a chunk's account trades, unscored, before its stretch: far more than the one
decision in which the weights action reaches its targets (docs/evolution.md)."""


def chunk_plan(window: tuple[int, int], every: int, chunks: int, warmup: int = WARMUP) -> tuple[list[int], int]:
    """Where the accounts of a ``chunks``-way pass start, and the warm-up ``w`` (at least
    ``warmup``) before each later stretch: every account trades ``w + L`` bars from its start
    ``window[0] + c·L``; the first keeps all its returns, account c ≥ 1 its last L, so the
    stretches tile the window and the last ends at ``window[1]``. ``L`` is a multiple of
    ``every``, so every account decides at the bars the single pass decides at. One start
    (the single pass) when the window is too short for ``chunks`` stretches of a decision."""
    t_lo, t_hi = window
    stretch = (t_hi - t_lo - warmup) // (chunks * every) * every
    if chunks <= 1 or stretch < every:
        return [t_lo], 0
    return [t_lo + c * stretch for c in range(chunks)], t_hi - t_lo - chunks * stretch


@torch.no_grad()
def run_policies(
    policy: Policy, data: MarketData, scales: StateScales, cfg: EnvConfig, window: tuple[int, int], accounts: int,
    compile: CompileMode = "eager", chunks: int = 1,
) -> np.ndarray:
    """Account values ``[T + 1, accounts]`` at each close of ``window``, one account per row of
    ``policy``'s batch: the multiplexed evaluator scores N agents in one pass this way.

    Each account starts with ``initial_cash`` at the close of ``window[0]``; T is
    ``window[1] − window[0]``. The policy decides at every ``cfg.decide_every``-th close.
    On CUDA with ``compile`` other than ``eager``, a whole decision is recorded once and
    replayed (:class:`Passes`). With ``chunks`` > 1 the window is traded in stretches side
    by side (:func:`chunk_plan`): the policy's batch is then ``accounts × chunks`` states,
    each account's chunks consecutive, and the values are the first chunk's, then the later
    stretches' returns chained on.
    """
    return Passes(policy, data, scales, cfg, window, accounts, compile, chunks)()


class Passes:
    """:func:`run_policies` for one window, batch of accounts and ``policy``, kept from one pass to
    the next: the env, the state and path buffers and, when recorded, the decision's CUDA graph
    are made at the first pass and serve the later ones (docs/training.md, what a generation
    keeps). A later pass scores what ``policy`` computes then, so a policy whose weights change
    between passes must keep them in the same tensors (copied in, as
    :class:`trainers.ppo.multiplex.Evaluation` does): a replayed graph reads the addresses it recorded."""

    def __init__(self, policy: Policy, data: MarketData, scales: StateScales, cfg: EnvConfig,
                 window: tuple[int, int], accounts: int, compile: CompileMode = "eager", chunks: int = 1) -> None:
        self.policy, self.accounts = policy, accounts
        self.starts, self.warm = chunk_plan(window, cfg.decide_every, chunks)
        self.length = window[1] - self.starts[-1]  # every account's bars: its warm-up and its stretch
        self.env = MarketEnv(data, scales, cfg, num_envs=accounts * len(self.starts),
                             window=(window[0], window[0] + self.length), random_start=False)
        self.replayed = capturing(self.env.device, compile)
        self.state: torch.Tensor | None = None
        self.recorded: Recorded | None = None
        self.path = torch.empty((cfg.decide_every, self.env.num_envs), dtype=torch.float64, device=self.env.device)

    def release(self) -> None:
        """Drop the recorded decision now: it refers back to this object, so only a garbage
        collection would otherwise free the memory its CUDA graph holds."""
        self.recorded = None

    def __call__(self) -> np.ndarray:
        """Account values ``[T + 1, accounts]`` of one pass (:func:`run_policies`)."""
        env = self.env
        self.state = env.reset(self.state)
        if len(self.starts) == 1:
            return self._pass()
        env.t = torch.tensor(self.starts, device=env.device).repeat(self.accounts)
        env.t_end = env.t + self.length
        env.observe(self.state)
        values = self._pass().reshape(self.length + 1, self.accounts, len(self.starts))
        first, warm = values[:, :, 0], self.warm  # the single pass's first bars, as they are
        growth = np.concatenate([values[warm + 1 :, :, c] / values[warm:-1, :, c] for c in range(1, len(self.starts))])
        return np.concatenate([first, first[-1] * np.cumprod(growth, axis=0)])

    def _pass(self) -> np.ndarray:
        """Account values at each close of one pass of the reset env."""
        env, state = self.env, self.state
        assert state is not None
        if self.replayed:
            return self._replay()
        values = [env.account_value().unsqueeze(0)]
        for _ in range(-(-(env.t_hi - env.t_lo) // env.cfg.decide_every)):  # one step per decision
            with profiler.operation("inference"):
                action = self.policy(state)
            with profiler.operation("simulation"):
                step = env.step(action)
                state = step.state
                assert step.path is not None
                values.append(step.path)
        return torch.cat(values).cpu().numpy().astype(np.float64)

    def _decide(self) -> None:
        """One full decision (``decide_every`` bars) on the pass's fixed buffers: what is recorded."""
        assert self.state is not None
        step = self.env.step(self.policy(self.state))
        assert step.path is not None
        self.state.copy_(step.state)
        self.path.copy_(step.path)
        self.env.pin()

    def _replay(self) -> np.ndarray:
        """:meth:`_pass` with each full decision replayed from a CUDA graph
        (trainers/common/capture.py); a shorter last decision runs as it is. The env's bar clock
        is the host's, set before each decision (a replay runs no Python)."""
        env, every = self.env, self.env.cfg.decide_every
        values = torch.empty((env.t_hi - env.t_lo + 1, env.num_envs), dtype=torch.float64, device=env.device)
        values[0] = env.account_value()
        env.pin()
        if self.recorded is None:
            self.recorded = Recorded(self._decide, enabled=True)
        bar = env.t_lo
        while bar < env.t_hi:
            bars, env.bar = min(every, env.t_hi - bar), bar
            if bars == every:
                self.recorded()
                values[bar - env.t_lo + 1 : bar - env.t_lo + 1 + bars] = self.path
            else:
                assert self.state is not None
                step = env.step(self.policy(self.state))
                assert step.path is not None
                values[bar - env.t_lo + 1 :] = step.path
            bar += bars
        return values.cpu().numpy()


def run_policy(
    actor: Policy, data: MarketData, scales: StateScales, cfg: EnvConfig, window: tuple[int, int]
) -> np.ndarray:
    """Account value at each close of ``window`` for one deterministic policy
    (``window[1] − window[0] + 1`` values)."""
    return run_policies(actor, data, scales, cfg, window, accounts=1)[:, 0]


def market_fill(data: MarketData, t: int, sold: torch.Tensor, bought: torch.Tensor, cash: torch.Tensor,
                shares: torch.Tensor, cost_pct: float) -> Fill:
    """Fill orders ``[1, n]`` decided at close t at the open of t+1 under the env's rules, in a
    ragged universe too: a stock with no tradable bar at t+1 is not bought and a position in
    it is sold at its last real close (``trainers/common/orders.py``)."""
    then = None if data.tradable is None else data.tradable[t + 1].cpu().unsqueeze(0)
    return fill_next(sold, bought, cash, shares, data.close[t].cpu().unsqueeze(0), data.open[t + 1].cpu().unsqueeze(0),
                     cost_pct, then)


def buy_and_hold(data: MarketData, cfg: EnvConfig, window: tuple[int, int]) -> np.ndarray:
    """Equal-weight buy-and-hold over ``window`` under the same fills and costs.

    Buys ``initial_cash / n`` of every stock, in whole shares, at the first open after
    ``window[0]`` (when the agent's first orders fill too) and holds to ``window[1]``. In a
    ragged universe it buys the stocks tradable at that close and open, and a holding that
    stops trading is sold at its last real close (the env's rule); later listings are not bought.
    """
    t_lo, t_hi = window
    price = data.open[t_lo + 1]
    if data.tradable is not None:
        return _ragged_buy_and_hold(data, cfg, window)
    shares = torch.floor(cfg.initial_cash / data.n_stocks / (price * (1.0 + cfg.cost_pct)))
    cash = cfg.initial_cash - float((shares * price).sum()) * (1.0 + cfg.cost_pct)
    marks = (data.close[t_lo + 1 : t_hi + 1] * shares).sum(dim=1) + cash
    return np.concatenate(([cfg.initial_cash], marks.cpu().numpy().astype(np.float64)))


def _ragged_buy_and_hold(data: MarketData, cfg: EnvConfig, window: tuple[int, int]) -> np.ndarray:
    assert data.tradable is not None
    t_lo, t_hi = window
    live = (data.tradable[t_lo] & data.tradable[t_lo + 1]).cpu()
    price = data.open[t_lo + 1].cpu()
    each = cfg.initial_cash / max(int(live.sum()), 1)
    bought = torch.where(live, torch.floor(each / (price * (1.0 + cfg.cost_pct))), 0.0).unsqueeze(0)
    cash = torch.tensor([cfg.initial_cash], dtype=torch.float64)
    shares = torch.zeros_like(bought)
    values = [cfg.initial_cash]
    for t in range(t_lo, t_hi):
        fill = market_fill(data, t, torch.zeros_like(shares), bought if t == t_lo else torch.zeros_like(shares),
                           cash, shares, cfg.cost_pct)
        cash, shares = fill.cash, fill.shares
        values.append(float(cash[0] + (shares[0] * data.close[t + 1].cpu()).sum()))
    return np.asarray(values, dtype=np.float64)
