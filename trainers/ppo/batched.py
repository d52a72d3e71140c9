"""N actor-critics as one batched model: the multiplexed population's networks and optimizer
(gmi-drl §3: many small trainers share one device; here they share
one set of kernels instead of one process each).

Every agent's layer ``l`` lives in one stacked tensor ``[N, in, out]`` (its bias in
``[N, 1, out]``), zero-padded to the widest agent, so a layer of all N agents is one
batched matmul (``torch.baddbmm``). Padding is exact, not approximate: a padded hidden unit
has zero weights and bias, so its ReLU output is 0, its outgoing weights see no input and
ReLU's derivative at 0 is 0, so every padded parameter gets a zero gradient and Adam (with
zero moments) leaves it at zero. Each agent therefore computes the function, gradients and
updates of its own unpadded :class:`trainers.common.nets.Actor` / :class:`trainers.common.nets.Critic`.
For the same reason a step may :meth:`BatchedNets.crop` the model to the agents it trains
and to their widest hidden layers, and compute only that.

Parameters are kept in the order of ``[*actor.parameters(), *critic.parameters()]`` (the
actor's ``log_std``, its layers, then the critic's layers), so Adam state converts one to
one to and from ``torch.optim.Adam``'s state dict.

:class:`Layout` says where each agent's envs sit in a stacked env and in these padded
``[N, M]`` batches.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from trainers.common.nets import Actor, Critic
from trainers.common.state import StockLayout

BETAS = (0.9, 0.999)
EPS = 1e-8
"""torch.optim.Adam's defaults."""
LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))
NARROW = 32
"""With ``fused``, a layer whose inputs are at most this wide is a broadcast product and a sum
rather than a batched matmul, so Inductor fuses it with the ops around it (docs/training.md,
the update's bytes)."""


def _linears(module: Actor | Critic) -> list[torch.nn.Linear]:
    return [m for m in module.net if isinstance(m, torch.nn.Linear)]


class BatchedNets:
    """The actors and critics of N agents, stacked and zero-padded; ``params`` are the tensors.

    ``widths[i]`` are agent ``i``'s hidden widths; every tensor is padded to the largest.
    """

    def __init__(self, params: list[torch.Tensor], widths: list[list[int]], layout: StockLayout | None = None,
                 price_ref: torch.Tensor | None = None, fused: bool = False) -> None:
        self.params, self.widths, self.n = params, widths, len(widths)
        self.layout = layout
        """The actors' per-stock layout (``policy: shared``), the same for every agent."""
        self.fused = fused
        """Narrow layers as products and sums (:data:`NARROW`): for ``train.compile: inductor``
        only; eager, they would move more bytes than the matmuls do."""
        if price_ref is None and layout is not None:
            price_ref = layout.price_ref_on(params[0].device)
        self.price_ref = price_ref
        """The layout's reference prices on the model's device, made once."""
        depth = (len(params) - 1) // 4  # log_std + (weight, bias) per layer, actor and critic alike
        self.log_std = params[0]
        self.actor = list(zip(params[1 : 1 + 2 * depth : 2], params[2 : 2 + 2 * depth : 2]))
        self.critic = list(zip(params[1 + 2 * depth :: 2], params[2 + 2 * depth :: 2]))

    @classmethod
    def stack(cls, actors: Sequence[Actor], critics: Sequence[Critic]) -> BatchedNets:
        """The agents' own modules, copied into stacked, zero-padded tensors."""
        widths = [[lin.out_features for lin in _linears(a)[:-1]] for a in actors]
        if len({len(w) for w in widths}) != 1:
            raise ValueError("multiplexed agents need the same number of hidden layers")
        if len({a.layout for a in actors}) != 1:
            raise ValueError("multiplexed agents need the same policy layout")
        params = [torch.stack([a.log_std.detach() for a in actors]).clone()]
        for nets in ([_linears(a) for a in actors], [_linears(c) for c in critics]):
            for depth in range(len(nets[0])):
                fan_in = max(net[depth].in_features for net in nets)
                fan_out = max(net[depth].out_features for net in nets)
                weight = torch.zeros((len(nets), fan_in, fan_out), device=params[0].device)
                bias = torch.zeros((len(nets), 1, fan_out), device=params[0].device)
                for i, net in enumerate(nets):
                    lin = net[depth]
                    weight[i, : lin.in_features, : lin.out_features] = lin.weight.detach().T
                    bias[i, 0, : lin.out_features] = lin.bias.detach()
                params += [weight, bias]
        return cls(params, widths, actors[0].layout)

    def _cuts(self, agents: Sequence[int]) -> list[tuple[int, ...]]:
        """Per tensor in ``params`` order, its extent for ``agents``: hidden widths cut to
        their largest among them (inputs and outputs stay whole)."""
        hidden = [max(self.widths[i][d] for i in agents) for d in range(len(self.actor) - 1)]
        cuts: list[tuple[int, ...]] = [tuple(self.log_std.shape[1:])]
        for layers in (self.actor, self.critic):
            for d, (weight, _) in enumerate(layers):
                fan_in = weight.shape[1] if d == 0 else hidden[d - 1]
                fan_out = weight.shape[2] if d == len(layers) - 1 else hidden[d]
                cuts += [(fan_in, fan_out), (1, fan_out)]
        return cuts

    def whole(self, agents: Sequence[int]) -> bool:
        """Whether ``agents`` are all the agents and need every padded unit."""
        return len(agents) == self.n and all(c == tuple(t.shape[1:]) for c, t in zip(self._cuts(agents), self.params))

    def crop(self, tensors: Sequence[torch.Tensor], agents: Sequence[int],
             rows: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Copies of rows ``agents`` of ``tensors`` (shaped like ``params``), cut to their
        widths; the tensors themselves when :meth:`whole`. ``rows`` is ``agents`` on the
        device, when the caller keeps one."""
        if self.whole(agents):
            return list(tensors)
        if rows is None:
            rows = torch.tensor(agents, device=tensors[0].device)
        return [t.index_select(0, rows)[(slice(None), *(slice(0, c) for c in cut))].contiguous()
                for t, cut in zip(tensors, self._cuts(agents))]

    @torch.no_grad()
    def paste(self, tensors: Sequence[torch.Tensor], agents: Sequence[int], values: Sequence[torch.Tensor]) -> None:
        """Write :meth:`crop` ``values`` back into ``tensors`` (a no-op for whole tensors)."""
        if self.whole(agents):
            return
        rows = torch.tensor(agents, device=tensors[0].device)
        for t, v in zip(tensors, values):
            t[(rows, *(slice(0, c) for c in v.shape[1:]))] = v

    def sub(self, agents: Sequence[int], grad: bool = False, rows: torch.Tensor | None = None) -> BatchedNets:
        """The model of ``agents`` alone, cut to their widths; with ``grad``, its tensors are
        leaves to differentiate (copies, or ``params`` themselves when whole)."""
        tensors = self.crop(self.params, agents, rows)
        if grad:
            tensors = [t.detach().requires_grad_() for t in tensors]
        return BatchedNets(tensors, [self.widths[i] for i in agents], self.layout, self.price_ref, self.fused)

    def _mlp(self, layers: list[tuple[torch.Tensor, torch.Tensor]], x: torch.Tensor) -> torch.Tensor:
        for depth, (weight, bias) in enumerate(layers):
            if self.fused and weight.shape[1] <= NARROW:  # [N, M, i, 1] × [N, 1, i, o], summed over i
                x = (x.unsqueeze(-1) * weight.unsqueeze(1)).sum(-2) + bias
            else:
                x = torch.baddbmm(bias, x, weight)
            if depth < len(layers) - 1:
                x = torch.relu(x)
        return x

    def mean(self, states: torch.Tensor) -> torch.Tensor:
        """Gaussian means ``[N, M, A]`` of the pre-``tanh`` actions for states ``[N, M, S]``
        (a shared per-stock scorer runs on the ``[N, M·n, k + 2]`` stock rows, as one batch)."""
        if self.layout is None:
            return self._mlp(self.actor, states)
        rows = self.layout.per_stock(states, self.price_ref)
        return self._mlp(self.actor, rows.flatten(1, 2)).reshape(rows.shape[:3])

    def value(self, states: torch.Tensor) -> torch.Tensor:
        """Critic values ``[N, M]`` for states ``[N, M, S]``."""
        return self._mlp(self.critic, states).squeeze(-1)

    def log_prob(self, mean: torch.Tensor, raw_actions: torch.Tensor, per_action: bool = False) -> torch.Tensor:
        """Log-density ``[N, M]`` of ``raw_actions`` under N(mean, exp(log_std)), summed over
        actions (``[N, M, A]`` per action with ``per_action``): torch.distributions.Normal's
        formula, term for term."""
        std = self.log_std.exp().unsqueeze(1)
        terms = -((raw_actions - mean) ** 2) / (2 * std**2) - std.log() - LOG_SQRT_2PI
        return terms if per_action else terms.sum(-1)

    def entropy(self) -> torch.Tensor:
        """Entropy ``[N]`` of each policy's Gaussian (independent of the state)."""
        return (0.5 + LOG_SQRT_2PI + self.log_std).sum(-1)

    @torch.no_grad()
    def write_back(self, i: int, actor: Actor, critic: Critic | None = None) -> None:
        """Copy agent ``i``'s weights, unpadded, into its own modules."""
        pairs = [(self.actor, actor)] + ([(self.critic, critic)] if critic is not None else [])
        for layers, module in pairs:
            for (weight, bias), lin in zip(layers, _linears(module)):
                lin.weight.copy_(weight[i, : lin.in_features, : lin.out_features].T)
                lin.bias.copy_(bias[i, 0, : lin.out_features])
        actor.log_std.copy_(self.log_std[i])

    def unpad(self, i: int, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Agent ``i``'s slices of tensors shaped like ``params`` (Adam moments), unpadded and
        in nn.Linear's layout (weights ``[out, in]``, biases ``[out]``)."""
        out = []
        for k, (t, cut) in enumerate(zip(tensors, self._cuts([i]))):
            part = t[(i, *(slice(0, c) for c in cut))]
            out.append(part.clone() if k == 0 else part.T.contiguous() if k % 2 else part[0].clone())
        return out

    @torch.no_grad()
    def pad_into(self, i: int, tensors: Sequence[torch.Tensor], unpadded: Sequence[torch.Tensor]) -> None:
        """Write agent ``i``'s unpadded tensors (nn.Linear layout) into padded ``tensors``."""
        for k, (t, u) in enumerate(zip(tensors, unpadded)):
            t[i].zero_()
            if k == 0:
                t[i] = u
            elif k % 2:
                t[i, : u.shape[1], : u.shape[0]] = u.T
            else:
                t[i, 0, : u.shape[0]] = u


class BatchedAdam:
    """Adam for N agents at once, each with its own learning rate and step count. A step
    moves only the agents it is given. Matches torch.optim.Adam (no weight decay, no
    amsgrad) agent by agent, after nn.utils.clip_grad_norm_ of each agent's gradient.

    With an ``anchor`` (tensors shaped like ``params``: the agents' starts) and its ``strength``
    ``[N]``, each step also moves the actor's layers by ``−lr × strength × (θ − anchor)``: AdamW's
    decoupled decay, towards the start instead of 0 (``ppo.anchor``); the log-std and the critic
    are not pulled."""

    def __init__(self, nets: BatchedNets, lr: torch.Tensor, anchor: list[torch.Tensor] | None = None,
                 strength: torch.Tensor | None = None) -> None:
        self.nets, self.lr = nets, lr
        self.exp_avg = [torch.zeros_like(p) for p in nets.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in nets.params]
        self.step_count = torch.zeros(nets.n, dtype=torch.float64, device=lr.device)
        self.anchor, self.strength = anchor, strength
        self.pulled = range(1, 1 + 2 * len(nets.actor))
        """The positions in ``params`` of the actor's layers, the tensors the anchor pulls."""

    @torch.no_grad()
    def step(self, sub: BatchedNets, grads: Sequence[torch.Tensor], agents: Sequence[int],
             max_grad_norm: float, rows: torch.Tensor | None = None, active: torch.Tensor | None = None) -> None:
        """Clip each agent's gradient to ``max_grad_norm`` (as nn.utils.clip_grad_norm_), then
        one Adam step of ``agents``, whose model ``sub`` (:meth:`BatchedNets.sub`) ``grads``
        belong to; ``rows`` is ``agents`` as a tensor on the device, when the caller keeps one.

        With ``active`` (``[N]`` bool on the device, ``agents`` every agent) the step moves only
        the active agents and leaves the others' weights, moments and step counts as they were:
        the whole padded population steps with fixed shapes and no host reads (the static
        update, docs/training.md)."""
        nets, n = self.nets, len(agents)
        if rows is None:
            rows = torch.tensor(agents, device=self.lr.device)
        norms = torch.stack([torch.linalg.vector_norm(g.reshape(n, -1), dim=1) for g in grads])
        coef = (max_grad_norm / (torch.linalg.vector_norm(norms, dim=0) + 1e-6)).clamp(max=1.0)
        if active is None:
            self.step_count[rows] += 1
            steps = self.step_count[rows]
        else:
            self.step_count.add_(active.to(self.step_count.dtype))
            steps = self.step_count.clamp(min=1.0)  # a resting agent's factors are computed, then masked
        beta1, beta2 = BETAS
        step_size = (self.lr[rows] / (1 - beta1**steps)).to(torch.float32)
        bias2_sqrt = (1 - beta2**steps).sqrt().to(torch.float32)
        moments = nets.crop(self.exp_avg, agents), nets.crop(self.exp_avg_sq, agents)
        anchor: list[torch.Tensor] | None = None
        if self.anchor is not None and self.strength is not None:
            anchor, pull = nets.crop(self.anchor, agents, rows), (self.lr[rows] * self.strength[rows]).float()
        for k, (p, g, m, v) in enumerate(zip(sub.params, grads, *moments)):
            shape = (n,) + (1,) * (p.dim() - 1)
            g = g * coef.reshape(shape)
            if active is None:
                m.lerp_(g, 1 - beta1)
                v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            else:
                moving = active.reshape(shape)
                m.copy_(torch.where(moving, m.lerp(g, 1 - beta1), m))
                v.copy_(torch.where(moving, v.mul(beta2).addcmul_(g, g, value=1 - beta2), v))
            denom = (v.sqrt() / bias2_sqrt.reshape(shape)).add_(EPS)
            update = (m * -step_size.reshape(shape)) / denom
            if anchor is not None and k in self.pulled:
                update = update - pull.reshape(shape) * (p - anchor[k])
            p.add_(update if active is None else torch.where(moving, update, 0.0))
        nets.paste(nets.params, agents, sub.params)
        nets.paste(self.exp_avg, agents, moments[0])
        nets.paste(self.exp_avg_sq, agents, moments[1])

    def state_of(self, i: int) -> dict[str, Any]:
        """Agent ``i``'s moments in the ``"state"`` part of ``torch.optim.Adam.state_dict()``
        (its learning rate is a hyperparameter of the agent, saved with them)."""
        if float(self.step_count[i]) == 0:
            state: dict[int, dict[str, torch.Tensor]] = {}
        else:
            step = self.step_count[i].to(torch.float32).cpu()
            moments = zip(self.nets.unpad(i, self.exp_avg), self.nets.unpad(i, self.exp_avg_sq))
            state = {k: {"step": step.clone(), "exp_avg": m, "exp_avg_sq": v} for k, (m, v) in enumerate(moments)}
        return {"state": state}

    @torch.no_grad()
    def load_state_of(self, i: int, saved: dict[str, Any]) -> None:
        """Take agent ``i``'s state from :meth:`state_of` (or a ``torch.optim.Adam.state_dict()``)."""
        state = saved["state"]
        if not state:
            self.step_count[i] = 0.0
            for t in (*self.exp_avg, *self.exp_avg_sq):
                t[i].zero_()
            return
        keys = sorted(state)
        self.nets.pad_into(i, self.exp_avg, [state[k]["exp_avg"].to(self.lr.device) for k in keys])
        self.nets.pad_into(i, self.exp_avg_sq, [state[k]["exp_avg_sq"].to(self.lr.device) for k in keys])
        self.step_count[i] = float(state[keys[0]]["step"])


@dataclass
class Layout:
    """Where each agent's envs sit in the stacked env (flat) and in the padded ``[N, M]`` layout.

    Made once per group of agents and kept: its index tensors live on the device, so
    gathering a step's states builds nothing from host data. When every agent has the same
    number of envs, a single step's ``[E, ...]`` and ``[N, M, ...]`` are views of each other.
    """

    counts: list[int]
    """Envs per agent, on the host."""
    sizes: torch.Tensor
    """The same, as a tensor on the device."""
    offsets: torch.Tensor
    agent_of_env: torch.Tensor
    """``[E_total]`` the agent each flat env belongs to."""
    local_of_env: torch.Tensor
    """``[E_total]`` its position among that agent's envs."""
    width: int
    """``M``: envs of the largest agent."""
    uniform: bool
    """Every agent has the same number of envs (no padded slots)."""
    _index: dict[tuple[str, int], torch.Tensor] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def of(cls, sizes: Sequence[int], device: torch.device) -> Layout:
        size = torch.tensor(sizes, device=device)
        offsets = torch.cumsum(size, 0) - size
        agent = torch.repeat_interleave(torch.arange(len(sizes), device=device), size)
        local = torch.arange(sum(sizes), device=device) - offsets[agent]
        return cls(list(sizes), size, offsets, agent, local, max(sizes), min(sizes) == max(sizes))

    def to_agents(self, x: torch.Tensor) -> torch.Tensor:
        """``[H, E_total, ...]`` → ``[N, H·M, ...]`` (padded slots repeat an agent's last env)."""
        h, total = x.shape[0], x.shape[1]
        if h == 1 and self.uniform:
            return x.reshape(len(self.counts), self.width, *x.shape[2:])
        if ("to", h) not in self._index:
            local = torch.minimum(torch.arange(self.width, device=x.device), self.sizes.unsqueeze(1) - 1)
            cols = self.offsets.unsqueeze(1) + local
            steps = torch.arange(h, device=x.device).view(1, h, 1)
            self._index["to", h] = (steps * total + cols.unsqueeze(1)).reshape(len(self.sizes), -1)
        return x.reshape(h * total, *x.shape[2:])[self._index["to", h]]

    def from_agents(self, y: torch.Tensor, h: int) -> torch.Tensor:
        """Inverse of :meth:`to_agents`: ``[N, H·M, ...]`` → ``[H, E_total, ...]``."""
        if h == 1 and self.uniform:
            return y.reshape(1, -1, *y.shape[2:])
        if ("from", h) not in self._index:
            steps = torch.arange(h, device=y.device).unsqueeze(1)
            self._index["from", h] = self.agent_of_env * (h * self.width) + steps * self.width + self.local_of_env
        return y.reshape(-1, *y.shape[2:])[self._index["from", h]]

    def samples(self, i: int, h: int) -> torch.Tensor:
        """Flat rollout rows of agent ``i`` in its own flattening order (``t·E_i + e``), which is
        how a single agent would number the samples it permutes."""
        dev = self.sizes.device
        t = torch.arange(h, device=dev).unsqueeze(1)
        e = torch.arange(self.counts[i], device=dev).unsqueeze(0)
        return (t * sum(self.counts) + sum(self.counts[:i]) + e).reshape(-1)
