"""PPO's objective and its advantages (Schulman et al. 2017; 2016), the math
:class:`trainers.ppo.ppo.PPO` runs: GAE(λ) with truncation bootstrapping, the advantages
normalised per learner, the clipped surrogate, and each learner's loss on its minibatch."""

from __future__ import annotations

import torch

from trainers.ppo.batched import BatchedNets, Layout


def gae_advantages(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_value: torch.Tensor,
    truncated: torch.Tensor,
    final_values: torch.Tensor,
    gamma: float | torch.Tensor,
    lam: float | torch.Tensor,
) -> torch.Tensor:
    """GAE(λ) advantages ``[H, E]`` (Schulman et al. 2016) with truncation bootstrapping.

    After a truncated step the env has already reset, so the TD target uses the value of
    the episode's final state (``final_values``) and the λ-recursion stops there.
    """
    advantages = torch.empty_like(rewards)
    gae = torch.zeros_like(next_value)
    for i in reversed(range(rewards.shape[0])):
        following = next_value if i == rewards.shape[0] - 1 else values[i + 1]
        bootstrap = torch.where(truncated[i], final_values[i], following)
        delta = rewards[i] + gamma * bootstrap - values[i]
        gae = delta + gamma * lam * gae * (~truncated[i])
        advantages[i] = gae
    return advantages


def clipped(ratio: torch.Tensor, advantages: torch.Tensor, clip: float | torch.Tensor,
            per_action: bool) -> torch.Tensor:
    """PPO's clipped surrogate ``min(ρA, clip(ρ, 1 − ε, 1 + ε)·A)`` per sample; with
    ``per_action`` the last dimension holds each action's term, and they are summed."""
    surr = torch.minimum(ratio * advantages, ratio.clamp(1 - clip, 1 + clip) * advantages)
    return surr.sum(-1) if per_action else surr


def ppo_loss(nets: BatchedNets, batch: tuple[torch.Tensor, ...], idx: torch.Tensor, weight: torch.Tensor,
             clip: torch.Tensor, entropy_coef: torch.Tensor, value_coef: float) -> torch.Tensor:
    """Each learner's loss on its minibatch ``idx`` ``[n, B]`` of the flat ``batch``, rows
    weighted by ``weight`` ``[n, B]``: the clipped surrogate plus ``value_coef`` × the value
    loss minus ``entropy_coef`` × the entropy, summed over the learners."""
    mb_obs, mb_actions, mb_logprobs, mb_advantages, mb_returns = (
        x.index_select(0, idx.flatten()).unflatten(0, idx.shape) for x in batch)
    mean = nets.mean(mb_obs)
    per_action = mb_logprobs.dim() == mb_actions.dim()
    ratio = (nets.log_prob(mean, mb_actions, per_action) - mb_logprobs).exp()
    c = clip.reshape((-1,) + (1,) * (ratio.dim() - 1))
    pg_loss = -(clipped(ratio, mb_advantages, c, per_action) * weight).sum(1)
    v_loss = ((nets.value(mb_obs) - mb_returns).pow(2) * weight).sum(1)
    return (pg_loss + value_coef * v_loss - entropy_coef * nets.entropy()).sum()


def normalised(advantages: torch.Tensor, layout: Layout) -> torch.Tensor:
    """Advantages ``[H, E(, n)]`` centred and scaled by each learner's own mean and unbiased
    standard deviation (as ``Tensor.std``) over its samples."""
    with torch.no_grad():
        h, n = advantages.shape[0], len(layout.counts)
        per_env = layout.agent_of_env
        count = (layout.sizes * h * advantages[0, 0].numel()).to(advantages.dtype)

        def per_learner(x: torch.Tensor) -> torch.Tensor:  # [H, E(, n)] -> each learner's sum
            per_env_sums = x.sum(0).reshape(len(per_env), -1).sum(1)
            return torch.zeros(n, device=x.device).index_add_(0, per_env, per_env_sums)

        mean = per_learner(advantages) / count
        shape = (-1,) + (1,) * (advantages.dim() - 2)
        centred = advantages - mean[per_env].reshape(shape)
        var = per_learner(centred.pow(2)) / (count - 1)
        return centred / (var.sqrt()[per_env].reshape(shape) + 1e-8)
