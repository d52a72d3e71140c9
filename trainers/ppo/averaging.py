"""The averaged policy of a PPO agent (``ppo.average``; docs/training.md, weight averaging).

An agent's policy after training is the average of the weights its updates went through, not
the last of them: Polyak & Juditsky's (1992) average of stochastic-approximation iterates, which
stochastic weight averaging (Izmailov et al. 2018) applies to networks. With a constant
learning rate the iterates wander around what the data can tell, and on one market history the
directions it cannot tell apart wander furthest; their average keeps what the updates agree on
(docs/training.md, weight averaging, says what it has been measured to do).

After the agent's ``k``-th iteration the average moves ``1 / min(k, window)`` of the way to the
new weights: the plain mean of the first ``window`` iterates, then an exponential average
over about ``window`` of them. The average is what the evaluator scores, what a snapshot keeps
and what is registered; the updates themselves keep training the last iterate.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch

from trainers.common.nets import Actor, Critic
from trainers.ppo.batched import BatchedNets


class WeightAverage:
    """The averaged actors of a batched model's learners, in the model's padded layout."""

    def __init__(self, nets: BatchedNets, averages: Sequence[Actor], critics: Sequence[Critic], counts: Sequence[int],
                 window: int) -> None:
        self.nets, self.window = nets, window
        self.params = BatchedNets.stack(averages, critics).params[: 1 + 2 * len(nets.actor)]
        """``log_std`` and the actor's layers, shaped like the model's."""
        self.counts = torch.tensor(list(counts), dtype=torch.float64, device=nets.params[0].device)

    @torch.no_grad()
    def advance(self, rows: torch.Tensor) -> None:
        """Fold the current weights of the learners ``rows`` (on the device) into their averages."""
        self.counts.index_add_(0, rows, torch.ones_like(rows, dtype=torch.float64))
        step = (1.0 / self.counts.index_select(0, rows).clamp(max=self.window)).to(self.params[0].dtype)
        for average, current in zip(self.params, self.nets.params):
            mine = average.index_select(0, rows)
            moved = mine + (current.index_select(0, rows) - mine) * step.reshape((-1,) + (1,) * (mine.dim() - 1))
            average.index_copy_(0, rows, moved)

    def policy(self) -> BatchedNets:
        """The model with the averaged actors (and the current critics, which no policy reads)."""
        return BatchedNets([*self.params, *self.nets.params[len(self.params):]], self.nets.widths, self.nets.layout,
                           self.nets.price_ref, self.nets.fused)

    def actor(self, i: int, like: Actor) -> Actor:
        """Learner ``i``'s averaged actor, unpadded, in a copy of ``like``."""
        out = copy.deepcopy(like)
        self.policy().write_back(i, out)
        return out

