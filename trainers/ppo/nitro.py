"""Nitro: Hessian-guided, cost-aware boosting of actor parallelism (nitro §5).

Each round Nitro inspects the curvature of the policy's surrogate objective (§5.1) and summarises it by the
ratio of the Hessian's extreme eigenvalues, R = -λmax/λmin (§5.2, eq. 2). A round whose R is low relative to
the recent rounds is a boosting opportunity: more actors (here, more envs per rollout) diversify the
trajectories (§6.1). The score is annealed by d^k because boosting pays most early in training, and the actor
count is clipped to a range set by the budget (§5.3). The extreme eigenvalues come from a few Lanczos
iterations on Hessian-vector products over a subset of the rollout (§6.2); the Hessian itself is never formed.

Pure PyTorch: the orchestration (Prefect tasks, MLflow logging) lives elsewhere.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import torch

from trainers._checks import require
from trainers.common.nets import Actor
from trainers.config import NitroConfig
from trainers.ppo.loss import clipped
from trainers.ppo.ppo import Rollout

_TINY = torch.finfo(torch.float64).tiny


def lanczos_extremes(
    hvp: Callable[[torch.Tensor], torch.Tensor], v0: torch.Tensor, steps: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Extreme Ritz values ``(λmin [B], λmax [B])`` (float64) of B symmetric operators after ``steps`` Lanczos
    iterations (§6.2: the extreme eigenvalues from Hessian-vector products only).

    ``v0`` is ``[B, P]``, one start vector per operator (normalised here); ``hvp`` maps ``[B, P]`` to ``[B, P]``
    row-wise and receives vectors in ``v0``'s dtype and device. The recurrence runs in float64 with full
    re-orthogonalisation (twice per step), so the Ritz values stay free of the ghost copies plain Lanczos makes.
    ``steps`` is clipped to P. A row whose residual vanishes (its Krylov space is exhausted, e.g. a low-rank
    operator) stops there: its later tridiagonal entries are decoupled and padded with its first Rayleigh
    quotient α₀, which lies inside that row's Ritz range, so the extremes are those of the exhausted space.
    """
    require(v0.dim() == 2, "v0 must be [B, P]")
    require(steps >= 1, "lanczos needs steps >= 1")
    b, p = v0.shape
    m = min(steps, p)
    tol = 64 * torch.finfo(v0.dtype).eps  # residual below this, relative to ‖H‖, is round-off: breakdown
    q = v0.to(torch.float64)
    q = q / q.norm(dim=1, keepdim=True).clamp_min(_TINY)
    basis = q.new_zeros(b, m, p)
    alpha, beta = q.new_zeros(b, m), q.new_zeros(b, m - 1)
    live = torch.zeros(b, m, dtype=torch.bool, device=q.device)  # row's step j lies in its Krylov space
    live[:, 0] = True
    scale = q.new_zeros(b)  # running estimate of ‖H‖: the largest ‖H q‖ seen
    for j in range(m):
        basis[:, j] = q
        w = hvp(q.to(v0.dtype)).to(torch.float64)
        scale = torch.maximum(scale, w.norm(dim=1))
        alpha[:, j] = (q * w).sum(1)
        if j == m - 1:
            break
        span = basis[:, : j + 1]
        for _ in range(2):  # removes α q_j, β q_{j-1} and the round-off along older vectors
            w = w - torch.einsum("bj,bjp->bp", torch.einsum("bjp,bp->bj", span, w), span)
        norm = w.norm(dim=1)
        ok = norm > tol * scale  # a stopped row has q = 0, hence w = 0: it stays stopped
        live[:, j + 1] = ok
        beta[:, j] = torch.where(ok, norm, 0.0)
        q = torch.where(ok[:, None], w / norm.clamp_min(_TINY)[:, None], 0.0)
        if not bool(ok.any()):
            break
    diag = torch.where(live, alpha, alpha[:, :1])
    tridiagonal = torch.diag_embed(diag) + torch.diag_embed(beta, 1) + torch.diag_embed(beta, -1)
    ritz = torch.linalg.eigvalsh(tridiagonal)
    return ritz[:, 0], ritz[:, -1]


def convexity_ratio(lam_max: torch.Tensor, lam_min: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Nitro eq. (2), elementwise in float64: R = -λmax / λmin of the Hessian of the maximised surrogate.

    With λmin < 0 < λmax, R = λmax/|λmin| > 0. Eq. (2) is undefined for λmin ≈ 0 and flips sign for λmin > 0,
    so the denominator is min(λmin, -eps·scale) with scale = max(|λmax|, |λmin|) (the product floored at the
    smallest normal float): a spectrum without negative curvature reads as the most convex surface, R =
    λmax/(eps·scale) (1/eps when λmax > 0), and R always lies in [-1/eps, 1/eps]. An all-zero spectrum gives 0.
    """
    lam_max, lam_min = torch.as_tensor(lam_max, dtype=torch.float64), torch.as_tensor(lam_min, dtype=torch.float64)
    scale = torch.maximum(lam_max.abs(), lam_min.abs())
    denominator = torch.minimum(lam_min, -(eps * scale).clamp_min(_TINY))
    return -lam_max / denominator


def surrogate(
    actor: Actor,
    states: torch.Tensor,
    raw_actions: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    clip: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped policy loss (the negated surrogate objective, :func:`trainers.ppo.loss.clipped`)
    of ``actor`` and its mean entropy: the objective whose curvature Nitro reads (§5.1).

    ``raw_actions`` are the pre-``tanh`` Gaussian samples the rollout took; the ratio
    π_new/π_old is computed on them, where the ``tanh`` Jacobian cancels. With per-action
    ``old_log_probs`` and ``advantages`` ``[B, n]`` (``credit: per_stock``) each action has
    its own clipped ratio, and a sample's loss is the sum over its actions.
    """
    dist = actor.distribution(states)
    log_probs = dist.log_prob(raw_actions)
    per_action = old_log_probs.dim() == log_probs.dim()
    if not per_action:
        log_probs = log_probs.sum(-1)
    loss = -clipped((log_probs - old_log_probs).exp(), advantages, clip, per_action).mean()
    return loss, dist.entropy().sum(-1).mean()


def surrogate_hvp(
    actor: Actor,
    states: torch.Tensor,
    raw_actions: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    clip: float,
) -> Callable[[torch.Tensor], torch.Tensor]:
    """Hessian-vector products ``v [1, P] -> H v [1, P]`` of the policy objective L(θ) = -(PPO's clipped loss)
    w.r.t. the actor's parameters, flattened in ``actor.parameters()`` order (§6.2: Hv = ∇θ(gθᵀv)).

    The gradient gθ is built once with its own graph (double backward); each product is one more backward
    through it, so a product costs about one backpropagation and the graph is kept for the next one.
    """
    params = list(actor.parameters())
    with torch.enable_grad():  # callers may hold torch.no_grad()
        loss, _ = surrogate(actor, states, raw_actions, old_log_probs, advantages, clip)
        grads = torch.autograd.grad(-loss, params, create_graph=True)
        flat = torch.cat([g.reshape(-1) for g in grads])

    def hvp(v: torch.Tensor) -> torch.Tensor:
        require(v.shape == (1, flat.numel()), f"hvp expects a [1, {flat.numel()}] vector")
        products = torch.autograd.grad(flat, params, grad_outputs=v[0].to(flat), retain_graph=True,
                                       materialize_grads=True)
        return torch.cat([h.reshape(-1) for h in products]).unsqueeze(0).to(v.dtype)

    return hvp


def actor_convexity(actor: Actor, rollout: Rollout, cfg: NitroConfig, clip: float, generator: torch.Generator) -> float:
    """Nitro's boosting detector for one agent (§5.1-5.2): R of eq. (2) for ``actor`` on ``rollout``.

    Draws ``cfg.subset`` samples without replacement (all of them if the rollout is smaller), normalises their
    advantages as PPO's update does (H is linear in the advantages, so only the centring changes R), and runs
    ``cfg.lanczos_steps`` Lanczos steps from a Gaussian start vector.
    Every draw comes from ``generator`` (on its own device), so a seeded generator makes the result
    deterministic. Gradients are taken with ``torch.autograd.grad``: parameters and their ``.grad`` stay as
    they were.
    """
    states = rollout.obs.flatten(0, 1)
    idx = torch.randperm(states.shape[0], generator=generator, device=generator.device)[: cfg.subset]
    idx = idx.to(states.device)
    adv = rollout.advantages.flatten(0, 1)[idx]
    adv = (adv - adv.mean()) / (adv.std() + 1e-8) if adv.numel() > 1 else torch.zeros_like(adv)
    hvp = surrogate_hvp(actor, states[idx], rollout.actions.flatten(0, 1)[idx],
                        rollout.logprobs.flatten(0, 1)[idx], adv, clip)
    params = list(actor.parameters())
    size = sum(p.numel() for p in params)
    v0 = torch.randn(1, size, generator=generator, device=generator.device, dtype=params[0].dtype)
    lam_min, lam_max = lanczos_extremes(hvp, v0.to(params[0].device), cfg.lanczos_steps)
    return float(convexity_ratio(lam_max, lam_min, cfg.eps))


class BoostScore:
    """Nitro's boosting score (§5.3): S_k = (R_max - R_k)/(R_max - R_min) · d^k over the last ``window`` R values.

    k counts every update from 0, and the window includes R_k, so S_k ∈ [0, 1]: near d^k when R_k is the
    window's lowest (a boosting opportunity), 0 when it is the highest. When the window's R values are all
    equal (always so at the first round) there is no evidence that this round is a low or a high point, so the
    normalised part is the neutral 0.5 rather than either extreme.
    """

    def __init__(self, window: int, decay: float) -> None:
        require(window >= 1, "boost score window must be >= 1")
        require(0 < decay <= 1, "boost score decay must be in (0, 1]")
        self.window, self.decay = window, decay
        self._history: deque[float] = deque(maxlen=window)
        self._rounds = 0

    @property
    def rounds(self) -> int:
        """Updates so far: the k of the next round."""
        return self._rounds

    def update(self, r: float) -> float:
        """Record round k's R_k and return S_k."""
        require(math.isfinite(r), "R must be finite")
        self._history.append(float(r))
        hi, lo = max(self._history), min(self._history)
        flat = hi - lo <= 1e-12 * max(1.0, abs(hi), abs(lo))
        score = (0.5 if flat else (hi - r) / (hi - lo)) * self.decay**self._rounds
        self._rounds += 1
        return score

    def state(self) -> dict[str, Any]:
        """Everything needed to continue exactly, as plain Python values."""
        return {"window": self.window, "decay": self.decay, "history": list(self._history), "rounds": self._rounds}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> BoostScore:
        """The score that :meth:`state` saved."""
        score = cls(int(state["window"]), float(state["decay"]))
        require(len(state["history"]) <= score.window, "boost score history is longer than its window")
        score._history.extend(float(r) for r in state["history"])
        score._rounds = int(state["rounds"])
        return score


def next_env_count(score: float, cfg: NitroConfig) -> int:
    """Nitro §5.3: I_k = clip(round(I_max · S_k), I_min, I_max), rounding halves up."""
    require(math.isfinite(score), "score must be finite")
    return min(cfg.max_envs, max(cfg.min_envs, math.floor(cfg.max_envs * score + 0.5)))
