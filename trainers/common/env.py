"""Vectorised stock-trading environment (finrl-podracer §3 eq. 1–4, §4.4).

E independent sub-environments are stepped as one batch of tensors on CPU or CUDA;
there is no Python loop over environments or stocks inside :meth:`MarketEnv.step`, and on
CUDA the step makes no host round trip, so a rollout stays on the device (§4.4, Fig. 3a).

MDP rules (docs/design.md, The market MDP):

* the agent sees bar t (close and indicators) and its orders fill at bar t+1's **open**;
* sells execute before buys, shares are integers ≥ 0 and cash never goes below 0;
* ``cost_pct`` is charged on every traded notional;
* the action is shares per stock (the paper's, ``trunc(a · hmax)``) or target weights
  (``action: weights``, a softmax allocation); both become whole-share orders;
* the reward is the change of account value from close t to close t+1, after costs
  (``reward: log``: its log ratio, on the same scale at the start);
* an optional turbulence gate: when bar t's turbulence index reaches the threshold, buys
  are blocked and every holding is sold at the next open (FinRL's risk control);
* a ragged universe (``MarketData.tradable``): a stock not tradable at t is masked from
  the state, never bought and sold if held; one not tradable at t+1 is not bought and a
  position in it is closed out at its last real close (docs/data.md, Ragged universes);
* intraday bars (``MarketData.session_last``) with ``env.overnight: flatten``: at a
  session's last bar every position is sold at that bar's close, before the decision
  taken there (docs/training.md, Minute bars: the MDP);
* the end of an episode (its length or the end of data) is a truncation, never terminal.

A **static** env (CUDA, or a compiled step; docs/training.md, GPU workers) keeps every shape
fixed and never reads the device from the host: it lists a fixed number of truncated envs, its
capacity (trainers/common/truncation.py), padded, instead of as many as truncated, takes its
episodes drawn up front for a whole rollout (:meth:`MarketEnv.draw_episodes`), and a window's
single pass counts its bars on the host.

With a ``baseline`` action, :meth:`MarketEnv.step` also returns each stock's **credit**
(``ppo.credit: per_stock``): what the sampled action's trade in that stock earned over
its holding period, less what the baseline's would have, from the same account.

What the trainers do to the batch of accounts around the MDP (stack, pin, resize,
checkpoint) is :class:`trainers.common.accounts.AccountBatch`, which the env extends.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from trainers._checks import require
from trainers.common.accounts import AccountBatch
from trainers.common.credit import per_stock_credit
from trainers.common.draws import draw_on
from trainers.common.market import MarketData  # the env's callers import it from here too
from trainers.common.orders import Fill, execute_orders
from trainers.common.state import StateScales, account_block, state_dim
from trainers.common.truncation import FinalSlots, place
from trainers.config import EnvConfig


class FinalStates(NamedTuple):
    """Last states of the episodes a step truncated: ``states[j]`` belongs to env ``index[j]``.

    On the CPU only the truncated envs are listed. A static env lists a fixed number, its
    :attr:`MarketEnv.slots`, so the step never asks the device how many truncated: each part's
    truncated envs in order, then padding entries whose ``index`` is E (their ``states`` are
    env E − 1's, to be dropped: :func:`trainers.common.truncation.place`).
    """

    index: torch.Tensor
    states: torch.Tensor


class Step(NamedTuple):
    state: torch.Tensor
    """``[E, state_dim]`` next states; a truncated env's is the first of its new episode."""
    reward: torch.Tensor
    """``[E]`` float32."""
    truncated: torch.Tensor
    """``[E]`` bool."""
    final: FinalStates
    credit: torch.Tensor | None = None
    """``[E, n]`` float32 per-stock credit when the step was given a ``baseline`` action."""
    path: torch.Tensor | None = None
    """``[k, E]`` account values at each close the step passed (a window's single pass only)."""

    def last_states(self) -> torch.Tensor:
        """``[E, state_dim]``: each env's last state of the bar just stepped to, i.e. the
        final state of a truncated episode (what gymnasium reports as the observation)."""
        return place(self.state, self.final.index, self.final.states)


class MarketEnv(AccountBatch):
    """E parallel accounts trading n stocks over the bars ``[t_lo, t_hi]`` of ``data``.

    With ``random_start`` each sub-environment starts at a random bar and runs for a random
    number of bars in ``[min_episode_len, episode_len]`` (fewer at the end of data);
    finished sub-environments are reset inside :meth:`step`. Without it, all start at
    ``t_lo`` and run once to ``t_hi``, with no reset (validation and backtests).
    """

    def __init__(
        self,
        data: MarketData,
        scales: StateScales,
        cfg: EnvConfig,
        num_envs: int,
        window: tuple[int, int],
        *,
        random_start: bool = True,
        seed: int = 0,
        rng_device: torch.device | str | None = None,
    ) -> None:
        t_lo, t_hi = window
        require(0 <= t_lo < t_hi < data.close.shape[0], f"bad env window {window}")
        require(cfg.turbulence_threshold is None or data.turbulence is not None,
                "env.turbulence_threshold needs the turbulence indicator (features.indicators)")
        self.data, self.scales, self.cfg = data, scales, cfg
        self.num_envs, self.t_lo, self.t_hi = num_envs, t_lo, t_hi
        self.random_start = random_start
        self.device = data.close.device
        self.seed = seed
        self.generator = torch.Generator(device=rng_device or self.device).manual_seed(seed)
        """Episode starts and lengths; on the CPU with ``train.rng: cpu`` (trainers/common/draws.py)."""
        self.rows = data.state_rows(scales)
        self.head = 1 + data.n_stocks
        """Columns of the account part of the state."""
        e, n = num_envs, data.n_stocks
        self.cash = torch.full((e,), cfg.initial_cash, dtype=torch.float64, device=self.device)
        self.shares = torch.zeros((e, n), dtype=torch.float64, device=self.device)
        self.value = self.cash.clone()
        self.t = torch.full((e,), t_lo, dtype=torch.long, device=self.device)
        self.t_end = torch.full((e,), t_hi, dtype=torch.long, device=self.device)
        self.bar = t_lo
        """The bar every account is at, counted on the host (a window's single pass only)."""
        self._all = torch.arange(e, device=self.device)
        self.slots = self._slots([e])
        """Where a static step lists the truncated envs, and how many (trainers/common/truncation.py)."""
        self.overflow = torch.zeros((), dtype=torch.long, device=self.device)
        """By how many envs a static step most overflowed a part's slots, on the device (0: never)."""
        self.static = self.device.type != "cpu"
        """Fixed shapes and no host reads of the device (see the module's docstring): on CUDA,
        or set for a compiled step. On the CPU a host read is free, and the step lists only
        the truncated envs."""
        self.streams: list[tuple[torch.Generator, int]] = [(self.generator, e)]
        """Random streams and how many consecutive envs each draws for (one, or one per stacked env)."""
        self._home: dict[str, torch.Tensor] | None = None

    def _slots(self, counts: list[int]) -> FinalSlots:
        """The static step's slots for parts of ``counts`` envs (every env, for a window's
        single pass: it never resets)."""
        return FinalSlots(self.cfg, self.t_hi - self.t_lo, counts, self.device, resets=self.random_start)

    def check_capacity(self) -> None:
        """Raise if a static step ever truncated more envs than its slots hold (their final
        states were dropped). Reads the device: call it where the host waits anyway."""
        self.slots.check(int(self.overflow))

    @property
    def state_dim(self) -> int:
        return state_dim(self.data.n_stocks, self.data.n_features)

    @property
    def action_dim(self) -> int:
        return self.data.n_stocks

    @property
    def holds_idle(self) -> bool:
        """Whether nothing can trade between two decisions: no turbulence gate, no stock that
        stops trading, no session close to flatten at. A held bar then leaves cash and shares
        as they were (its orders are all zero), so :meth:`step` skips to the next decision."""
        return self.cfg.turbulence_threshold is None and self.data.tradable is None and not self.flattens

    def _skip_to(self, stop: torch.Tensor, path: list[torch.Tensor], held: int) -> None:
        """Hold to ``stop`` without trading (:attr:`holds_idle`); a window's single pass marks
        the account at each of the ``held`` closes on the way (every env is at the same bar
        there, and the host counts them)."""
        if not self.random_start:
            close = self.data.close
            path.extend(self.cash + (self.shares * close.index_select(0, self.t + j)).sum(dim=1)
                        for j in range(1, held + 1))
        self.t = stop

    @property
    def flattens(self) -> bool:
        """Whether positions are sold at each session's close (``env.overnight: flatten`` on intraday bars)."""
        return self.cfg.overnight == "flatten" and self.data.session_last is not None

    def account_value(self) -> torch.Tensor:
        """Cash plus holdings marked at the current bar's close, ``[E]``."""
        return self.cash + (self.shares * self.data.close.index_select(0, self.t)).sum(dim=1)

    def observe(self, out: torch.Tensor | None = None, index: torch.Tensor | None = None) -> torch.Tensor:
        """States (float32) for the bar each sub-environment is at: all ``[E, state_dim]``, or
        the envs in ``index``. ``out`` receives them without a new allocation: fresh buffers
        of this size cost page faults that dominate a large batch on the CPU."""
        t, cash, shares = self.t, self.cash, self.shares
        if index is not None:
            t, cash, shares = t[index], cash[index], shares[index]
        state = torch.index_select(self.rows, 0, t, out=out) if out is not None else self.rows.index_select(0, t)
        state[:, : self.head] = account_block(cash, shares, self.scales)
        return state

    def reset(self, out: torch.Tensor | None = None) -> torch.Tensor:
        """Reset every sub-environment and return the first states."""
        self.bar = self.t_lo
        self._reset_where(torch.ones(self.num_envs, dtype=torch.bool, device=self.device), self._episodes())
        return self.observe(out)

    def _episodes(self) -> tuple[torch.Tensor, torch.Tensor]:
        """New (start, end) bars for every env. Drawn on every reset and every training step,
        needed or not, so the random stream never depends on which envs finished."""
        if not self.random_start:
            return torch.full_like(self.t, self.t_lo), torch.full_like(self.t, self.t_hi)
        start, end = self.draw_episodes(1)
        return start[0], end[0]

    def draw_episodes(self, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(start, end) bars ``[steps, E]`` of the episodes the next ``steps`` training steps
        draw, made up front (a rollout draws its whole horizon at once). Each stream draws its
        starts, then its lengths, step after step, as a step-by-step rollout would
        (:func:`trainers.common.draws.draw_on`)."""
        starts, lengths = [], []
        for g, count in self.streams:
            start, length = draw_on(g, steps, lambda lead, g=g, count=count: (
                torch.randint(self.t_lo, self.t_hi, (*lead, count), generator=g, device=g.device),
                torch.randint(self.cfg.min_episode_len, self.cfg.episode_len + 1, (*lead, count), generator=g,
                              device=g.device)), self.device)
            starts.append(start)
            lengths.append(length)
        start, length = (parts[0] if len(parts) == 1 else torch.cat(parts, dim=1) for parts in (starts, lengths))
        return start, torch.clamp(start + length, max=self.t_hi)  # a start below t_hi leaves >= 1 step

    def _reset_where(self, mask: torch.Tensor, episodes: tuple[torch.Tensor, torch.Tensor]) -> None:
        cash = self.cfg.initial_cash
        self.cash = torch.where(mask, torch.full_like(self.cash, cash), self.cash)
        self.value = torch.where(mask, torch.full_like(self.value, cash), self.value)
        self.shares = torch.where(mask.unsqueeze(1), torch.zeros_like(self.shares), self.shares)
        self.t = torch.where(mask, episodes[0], self.t)
        self.t_end = torch.where(mask, episodes[1], self.t_end)

    def _gate(self) -> torch.Tensor | None:
        """Accounts whose current bar's turbulence reaches the threshold (known at bar t)."""
        if self.cfg.turbulence_threshold is None:
            return None
        assert self.data.turbulence is not None
        return self.data.turbulence[self.t] >= self.cfg.turbulence_threshold

    def step(self, action: torch.Tensor, out: torch.Tensor | None = None,
             baseline: torch.Tensor | None = None,
             episodes: tuple[torch.Tensor, torch.Tensor] | None = None) -> Step:
        """Advance every sub-environment by one decision: ``decide_every`` bars, fewer where its
        episode ends sooner. ``action`` trades at the first bar's close; the others trade only
        the gate and close-outs. ``out`` (``[E, state_dim]``) receives the next states, e.g.
        the rollout buffer's next slot. With a ``baseline`` action (the policy's mean) the step
        also returns the per-stock credit of :meth:`_credit`. ``episodes`` are this step's
        row of :meth:`draw_episodes` (default: drawn here).

        Truncated sub-environments start a new episode inside the step, and the last states
        of the finished ones come back in ``final`` so the learner can bootstrap their value.
        """
        start, stop = self.t, torch.clamp(self.t + self.cfg.decide_every, max=self.t_end)
        held = 0
        if not self.random_start:  # every account at one bar, which the host counts
            bar, self.bar = self.bar, min(self.bar + self.cfg.decide_every, self.t_hi)
            held = self.bar - bar - 1
        credit = self._bar(action, baseline, stop)
        path = [] if self.random_start else [self.account_value()]
        if self.holds_idle:
            self._skip_to(stop, path, held)
        for j in range(1, 1 if self.holds_idle else self.cfg.decide_every):
            if not self.random_start and j > held:
                break
            active = self.t < stop
            if not self.static and self.random_start and not bool(active.any()):
                break  # the CPU's shortcut: every episode is done
            self._bar(None, None, stop, active)
            if not self.random_start:
                path.append(self.account_value())
        value = path[-1] if path else self.account_value()
        if self.cfg.reward != "value":
            growth = torch.log(value.clamp(min=1e-9) / self.value.clamp(min=1e-9))
            if self.cfg.reward == "excess":
                growth = growth - self.data.market_growth_between(start, self.t)
            reward = (growth * (self.cfg.initial_cash * self.cfg.reward_scale)).to(torch.float32)
        else:
            reward = ((value - self.value) * self.cfg.reward_scale).to(torch.float32)
        self.value = value
        truncated = self.t >= self.t_end
        if not self.random_start:  # one pass over the window: nothing resets
            return Step(self.observe(out), reward, truncated, FinalStates(self._all[:0], self.rows[:0]), credit,
                        torch.stack(path))
        episodes = self._episodes() if episodes is None else episodes
        if not self.static:  # list only the truncated envs; skip the reset when none did
            index = truncated.nonzero().squeeze(1)
            if not len(index):
                return Step(self.observe(out), reward, truncated, FinalStates(index, self.rows[:0]), credit)
            final = FinalStates(index, self.observe(index=index))
        else:  # no host round trip: each part's truncated envs in its slots, padded with index E
            index, over = self.slots.list(truncated)
            self.overflow.copy_(torch.maximum(self.overflow, over))
            final = FinalStates(index, self.observe(index=index.clamp(max=self.num_envs - 1)))
        self._reset_where(truncated, episodes)
        return Step(self.observe(out), reward, truncated, final, credit)

    def _bar(self, action: torch.Tensor | None, baseline: torch.Tensor | None, stop: torch.Tensor,
             active: torch.Tensor | None = None) -> torch.Tensor | None:
        """Trade one bar: ``action``'s orders at close t (``None``: a held bar) fill at t+1's
        open, in the envs ``active`` (``None``: all). Returns the per-stock credit (with a
        ``baseline``)."""
        t = self.t
        t_next = t + 1 if active is None else torch.where(active, t + 1, t)
        close, price = self.data.close.index_select(0, t), self.data.open.index_select(0, t_next)
        mask = self.data.tradable
        masks = None if mask is None else (mask.index_select(0, t), mask.index_select(0, t_next))
        gate = self._gate()
        fill = execute_orders(self.cfg, action, self.cash, self.shares, close, price, gate, masks)
        credit = None if baseline is None else self._credit(
            fill, execute_orders(self.cfg, baseline, self.cash, self.shares, close, price, gate, masks), stop)
        if active is None:
            self.cash, self.shares = fill.cash, fill.shares
        else:
            self.cash = torch.where(active, fill.cash, self.cash)
            self.shares = torch.where(active.unsqueeze(1), fill.shares, self.shares)
        self.t = t_next
        if self.flattens:
            assert self.data.session_last is not None
            self._flatten(self.data.session_last.index_select(0, t_next))
        return credit

    def _flatten(self, where: torch.Tensor) -> None:
        """Sell every position of the accounts ``where`` (``[E]``, at a session's last bar) at
        the current bar's close: a market-on-close order filled by the one fill rule
        (:func:`trainers.common.orders.execute_orders`, the close as the price, costs charged), so
        the decision taken at this close sees a flat account. An account already flat, or
        not at a session's last bar, is left bit for bit as it was."""
        close = self.data.close.index_select(0, self.t)
        fill = execute_orders(self.cfg, None, self.cash, self.shares, close, close, where)
        self.cash, self.shares = fill.cash, fill.shares

    def _credit(self, fill: Fill, base: Fill, stop: torch.Tensor) -> torch.Tensor:
        """``[E, n]`` per-stock credit of the step just filled (``self.t`` still the bar decided
        at; :func:`trainers.common.credit.per_stock_credit`)."""
        return per_stock_credit(self.data, self.cfg, fill, base, self.t, stop, self.flattens)
