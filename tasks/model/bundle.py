"""The policy bundle: weights plus every constant serving needs (docs/design.md, registry and delivery).

``data/models/`` holds ``policy.pt`` (actor weights), ``policy.json`` (symbols,
indicator names, train-only normalisation stats, state scales, env constants, network
shape) and ``hparams.json`` (the PPO hyperparameters, for a warm start). The backtest, the
MLflow pyfunc and delivery all load it through :func:`load`, so a served policy sees exactly
the state it was trained on.

The policy is one :class:`trainers.common.nets.Actor` or an :class:`trainers.population.ensemble.Ensemble` of
several (``PolicyMeta.members``); both map a state to an action in (-1, 1), so every
consumer serves either unchanged. :func:`policy_bundle` assembles either from a training run.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from tasks.errors import ConfigError, MissingInput
from trainers.algorithms import DEFAULT_LEARNER, config_of
from trainers.common.nets import Actor, ActorShape, new_actor
from trainers.common.state import StateScales, normalise_features, state_dim
from trainers.config import EnvConfig
from trainers.population.ensemble import Ensemble

if TYPE_CHECKING:  # serving loads bundles without the training stack
    from tasks.config import Params
    from tasks.data import feature_set
    from trainers.population.evolution import EvolutionResult

log = logging.getLogger("podracer.train")  # the train stage writes the bundle
WEIGHTS, META, HPARAMS = "policy.pt", "policy.json", "hparams.json"
Policy = Actor | Ensemble
"""A served policy: ``forward(state) -> action in (-1, 1)^n``."""


@dataclass(frozen=True)
class PolicyMeta:
    symbols: list[str]
    feature_names: list[str]
    mean: list[list[float]]
    std: list[list[float]]
    scales: StateScales
    env: EnvConfig
    net_dims: list[int]
    freq: str
    data_version: str
    policy: str = "mlp"
    """``ppo.policy`` of the weights: ``mlp`` or ``shared`` (a per-stock scorer)."""
    algorithm: str = DEFAULT_LEARNER
    """The learner that trained the policy: ``ppo``, ``sac``, or ``ensemble`` for an ensemble."""
    members: list[dict[str, Any]] = field(default_factory=list)
    """Empty for a single actor; for an ensemble one dict per member with at least
    ``algorithm``, ``net_dims``, ``fitness`` (its validation fitness) and ``job``."""

    @property
    def state_dim(self) -> int:
        return state_dim(len(self.symbols), len(self.feature_names))

    def actor(self) -> Policy:
        """An untrained deterministic policy of this bundle's shape, to load weights into: an
        :class:`Ensemble` of one actor per member (each of its own ``net_dims``), or one actor."""
        if self.members:
            return Ensemble([self._actor(m["net_dims"]) for m in self.members], self.env.action)
        return self._actor(self.net_dims)

    def _actor(self, net_dims: list[int]) -> Actor:
        return new_actor(ActorShape.of(len(self.symbols), len(self.feature_names), self.scales, self.policy), net_dims)

    def normalise(self, raw: np.ndarray) -> np.ndarray:
        """Normalise raw indicators ``[..., n, k]`` with the saved train-window stats."""
        return normalise_features(raw, np.asarray(self.mean), np.asarray(self.std))

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> PolicyMeta:
        raw = json.loads(text)
        raw["scales"] = StateScales.from_dict(raw["scales"])
        raw["env"] = EnvConfig(**raw["env"])
        return cls(**raw)


def ensemble_weights(actors: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The flat state dict of an :class:`Ensemble` of actors with these state dicts, in
    ``meta.members``' order (so the train stage saves one without building modules)."""
    return {f"members.{i}.{k}": v for i, weights in enumerate(actors) for k, v in weights.items()}


def save(folder: Path, actor: dict[str, torch.Tensor], meta: PolicyMeta,
         hparams: dict[str, float] | None = None) -> None:
    """Write the bundle: ``actor`` is the policy's state dict (an ensemble's flat one, see
    :func:`ensemble_weights`); ``hparams`` (the policy's PPO hyperparameters) let the next
    continuous-training cycle warm-start a population from it."""
    torch.save(actor, folder / WEIGHTS)
    (folder / META).write_text(meta.to_json())
    if hparams is not None:
        (folder / HPARAMS).write_text(json.dumps(hparams, indent=1))


def load_hparams(folder: Path) -> dict[str, float] | None:
    """The bundle's PPO hyperparameters, or None for a bundle saved before they were kept."""
    path = folder / HPARAMS
    return {k: float(v) for k, v in json.loads(path.read_text()).items()} if path.exists() else None


def net_dims(params: Params, algorithm: str, hparams: dict[str, float]) -> list[int]:
    """The actor's hidden layers of an ``algorithm`` agent with ``hparams``."""
    return list(config_of(params, algorithm).with_hparams(hparams).net_dims)


def policy_bundle(params: Params, fs: feature_set.FeatureSet, scales: StateScales, data_version: str,
                  result: EvolutionResult) -> tuple[dict[str, torch.Tensor], PolicyMeta]:
    """The model to register: the best validation snapshot, or with ``registry.ensemble: k``
    the run's top k agents as one policy acting on the mean of their target allocations
    (:class:`trainers.population.ensemble.Ensemble`; finrl-podracer §6)."""
    k = params.registry.ensemble
    meta = PolicyMeta(
        symbols=fs.symbols, feature_names=fs.feature_names, mean=fs.mean.tolist(), std=fs.std.tolist(),
        scales=scales, env=params.env, net_dims=net_dims(params, result.best_algorithm, result.best_hparams),
        freq=params.data.freq, data_version=data_version, policy=params.ppo.policy, algorithm=result.best_algorithm)
    if k == 1:
        return {name: v.cpu() for name, v in result.best_actor.items()}, meta
    leaders = result.leaders[:k]
    if len(leaders) < k:
        raise ConfigError(f"registry.ensemble {k}: the run ended with only {len(leaders)} agents")
    members = [{"algorithm": m.algorithm, "net_dims": net_dims(params, m.algorithm, m.hparams), "fitness": m.fitness,
                "job": m.job} for m in leaders]
    log.info("ensemble of %d: %s", k,
             ", ".join(f"job {m.job} ({m.algorithm}, validation {m.fitness:.3f})" for m in leaders))
    weights = ensemble_weights([{name: v.cpu() for name, v in m.actor.items()} for m in leaders])
    return weights, replace(meta, members=members, algorithm="ensemble")


def load(folder: Path) -> tuple[Policy, PolicyMeta]:
    """Rebuild the deterministic policy (an actor or an ensemble) and its constants from a bundle folder."""
    if not (folder / WEIGHTS).exists():
        raise MissingInput(f"{folder / WEIGHTS}: not found (run `podracer train` first)")
    meta = PolicyMeta.from_json((folder / META).read_text())
    actor = meta.actor()
    actor.load_state_dict(torch.load(folder / WEIGHTS, map_location="cpu", weights_only=True))
    actor.eval()
    return actor, meta
