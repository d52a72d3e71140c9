"""N actor-critics as one batched model: the multiplexed population's networks and optimizer
(gmi-drl-gpu-multiplexing.txt §3: many small trainers share one device; here they share
one set of kernels instead of one process each).

Every agent's layer ``l`` lives in one stacked tensor ``[N, in, out]`` (its bias in
``[N, 1, out]``), zero-padded to the widest agent, so a layer of all N agents is one
batched matmul (``torch.baddbmm``). Padding is exact, not approximate: a padded hidden unit
has zero weights and bias, so its ReLU output is 0, its outgoing weights see no input and
ReLU's derivative at 0 is 0, so every padded parameter gets a zero gradient and Adam (with
zero moments) leaves it at zero. Each agent therefore computes the function, gradients and
updates of its own unpadded :class:`trainers.ppo.Actor` / :class:`trainers.ppo.Critic`.

Parameters are kept in the order of ``PPOLearner.params`` (the actor's, then the critic's),
so Adam state converts one to one to and from ``torch.optim.Adam``'s state dict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from trainers.ppo import Actor, Critic

BETAS = (0.9, 0.999)
EPS = 1e-8
"""torch.optim.Adam's defaults, which PPOLearner uses."""
LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))


def _linears(module: Actor | Critic) -> list[torch.nn.Linear]:
    return [m for m in module.net if isinstance(m, torch.nn.Linear)]


class BatchedNets:
    """The actors and critics of N agents, stacked and zero-padded; ``params`` are the leaves."""

    def __init__(self, actors: Sequence[Actor], critics: Sequence[Critic]) -> None:
        self.n = len(actors)
        self.widths = [[lin.out_features for lin in _linears(a)[:-1]] for a in actors]
        depth = {len(w) for w in self.widths}
        if len(depth) != 1:
            raise ValueError("multiplexed agents need the same number of hidden layers")
        device = actors[0].log_std.device
        self.actor = self._stack([_linears(a) for a in actors], device)
        self.critic = self._stack([_linears(c) for c in critics], device)
        self.log_std = torch.stack([a.log_std.detach() for a in actors]).clone().requires_grad_()
        self.params: list[torch.Tensor] = [self.log_std, *self._flat(self.actor), *self._flat(self.critic)]
        """In ``PPOLearner.params`` order: the actor's own ``log_std`` first, then its layers, then the critic's."""

    @staticmethod
    def _stack(nets: list[list[torch.nn.Linear]], device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
        layers = []
        for depth in range(len(nets[0])):
            fan_in = max(net[depth].in_features for net in nets)
            fan_out = max(net[depth].out_features for net in nets)
            weight = torch.zeros((len(nets), fan_in, fan_out), device=device)
            bias = torch.zeros((len(nets), 1, fan_out), device=device)
            for i, net in enumerate(nets):
                lin = net[depth]
                weight[i, : lin.in_features, : lin.out_features] = lin.weight.detach().T
                bias[i, 0, : lin.out_features] = lin.bias.detach()
            layers.append((weight.requires_grad_(), bias.requires_grad_()))
        return layers

    @staticmethod
    def _flat(layers: list[tuple[torch.Tensor, torch.Tensor]]) -> list[torch.Tensor]:
        return [t for layer in layers for t in layer]

    @staticmethod
    def _mlp(layers: list[tuple[torch.Tensor, torch.Tensor]], x: torch.Tensor) -> torch.Tensor:
        for depth, (weight, bias) in enumerate(layers):
            x = torch.baddbmm(bias, x, weight)
            if depth < len(layers) - 1:
                x = torch.relu(x)
        return x

    def select(self, agents: torch.Tensor | None) -> BatchedNets:
        """A view of the agents in ``agents`` (all when None); differentiable back to ``params``."""
        if agents is None:
            return self
        view = object.__new__(BatchedNets)
        pick = [(w.index_select(0, agents), b.index_select(0, agents)) for w, b in self.actor]
        view.actor = pick
        view.critic = [(w.index_select(0, agents), b.index_select(0, agents)) for w, b in self.critic]
        view.log_std = self.log_std.index_select(0, agents)
        view.n = len(agents)
        return view

    def mean(self, states: torch.Tensor) -> torch.Tensor:
        """Gaussian means ``[N, M, A]`` of the pre-``tanh`` actions for states ``[N, M, S]``."""
        return self._mlp(self.actor, states)

    def value(self, states: torch.Tensor) -> torch.Tensor:
        """Critic values ``[N, M]`` for states ``[N, M, S]``."""
        return self._mlp(self.critic, states).squeeze(-1)

    def log_prob(self, mean: torch.Tensor, raw_actions: torch.Tensor) -> torch.Tensor:
        """Log-density ``[N, M]`` of ``raw_actions`` under N(mean, exp(log_std)), summed over
        actions: torch.distributions.Normal's formula, term for term."""
        std = self.log_std.exp().unsqueeze(1)
        return (-((raw_actions - mean) ** 2) / (2 * std**2) - std.log() - LOG_SQRT_2PI).sum(-1)

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

    def shapes(self, i: int) -> list[tuple[int, ...]]:
        """Agent ``i``'s unpadded parameter shapes, in ``params`` order (nn.Linear layout)."""
        out: list[tuple[int, ...]] = [(self.log_std.shape[1],)]
        for layers in (self.actor, self.critic):
            sizes = [layers[0][0].shape[1], *self.widths[i], layers[-1][0].shape[2]]
            for d in range(len(layers)):
                out += [(sizes[d + 1], sizes[d]), (sizes[d + 1],)]
        return out

    def unpad(self, i: int, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Agent ``i``'s slices of tensors shaped like ``params`` (gradients, Adam moments),
        unpadded and in nn.Linear's ``[out, in]`` layout."""
        out = []
        for t, shape in zip(tensors, self.shapes(i)):
            if len(shape) == 2:
                out.append(t[i, : shape[1], : shape[0]].T.contiguous())
            elif t.dim() == 3:  # bias [N, 1, out]
                out.append(t[i, 0, : shape[0]].clone())
            else:  # log_std [N, A]
                out.append(t[i].clone())
        return out

    def pad_into(self, i: int, tensors: Sequence[torch.Tensor], unpadded: Sequence[torch.Tensor]) -> None:
        """Write agent ``i``'s unpadded tensors (nn.Linear layout) into padded ``tensors``."""
        for t, u in zip(tensors, unpadded):
            if u.dim() == 2:
                t[i].zero_()
                t[i, : u.shape[1], : u.shape[0]] = u.T
            elif t.dim() == 3:
                t[i].zero_()
                t[i, 0, : u.shape[0]] = u
            else:
                t[i] = u


class BatchedAdam:
    """Adam for N agents at once, each with its own learning rate and step count; only the
    agents flagged active in a step move. Matches torch.optim.Adam (no weight decay, no
    amsgrad) agent by agent, and PPOLearner's gradient-norm clipping before it."""

    def __init__(self, nets: BatchedNets, lr: torch.Tensor) -> None:
        self.nets, self.lr = nets, lr
        self.exp_avg = [torch.zeros_like(p) for p in nets.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in nets.params]
        self.step_count = torch.zeros(nets.n, dtype=torch.float64, device=lr.device)

    @torch.no_grad()
    def step(self, grads: Sequence[torch.Tensor], active: torch.Tensor, max_grad_norm: float) -> None:
        """Clip each agent's gradient to ``max_grad_norm`` (as nn.utils.clip_grad_norm_), then
        one Adam step for the agents where ``active`` ``[N]`` is true; the others are untouched."""
        n = self.nets.n
        norms = torch.stack([torch.linalg.vector_norm(g.reshape(n, -1), dim=1) for g in grads])
        total = torch.linalg.vector_norm(norms, dim=0)
        coef = torch.where(active, (max_grad_norm / (total + 1e-6)).clamp(max=1.0), 0.0)  # resting agents: no gradient
        beta1, beta2 = BETAS
        self.step_count += active
        steps = self.step_count.clamp(min=1.0)
        step_size = torch.where(active, self.lr / (1 - beta1**steps), 0.0).to(torch.float32)
        bias2_sqrt = (1 - beta2**steps).sqrt().to(torch.float32)
        keep = torch.where(active, 1.0 - beta1, 0.0).to(torch.float32)
        decay = torch.where(active, beta2, 1.0).to(torch.float32)
        for p, g, m, v in zip(self.nets.params, grads, self.exp_avg, self.exp_avg_sq):
            shape = (n,) + (1,) * (p.dim() - 1)
            g = g * coef.reshape(shape)
            m.lerp_(g, keep.reshape(shape))
            v.mul_(decay.reshape(shape)).addcmul_(g, g, value=1 - beta2)
            denom = (v.sqrt() / bias2_sqrt.reshape(shape)).add_(EPS)
            p.add_((m * -step_size.reshape(shape)) / denom)

    def state_of(self, i: int, groups: list[dict[str, Any]]) -> dict[str, Any]:
        """Agent ``i``'s optimizer state in ``torch.optim.Adam.state_dict()`` form; ``groups``
        are its param groups as loaded (their ``lr`` is replaced by the current one)."""
        if float(self.step_count[i]) == 0:
            state: dict[int, dict[str, torch.Tensor]] = {}
        else:
            step = self.step_count[i].to(torch.float32).cpu()
            moments = zip(self.nets.unpad(i, self.exp_avg), self.nets.unpad(i, self.exp_avg_sq))
            state = {k: {"step": step.clone(), "exp_avg": m, "exp_avg_sq": v} for k, (m, v) in enumerate(moments)}
        return {"state": state, "param_groups": [{**g, "lr": float(self.lr[i])} for g in groups]}

    @torch.no_grad()
    def load_state_of(self, i: int, saved: dict[str, Any]) -> None:
        """Take agent ``i``'s state from a ``torch.optim.Adam.state_dict()``."""
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
