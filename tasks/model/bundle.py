"""The policy bundle: weights plus every constant serving needs (docs/design.md, registry and delivery).

``data/models/`` holds ``policy.pt`` (actor weights), ``policy.json`` (symbols,
indicator names, train-only normalisation stats, state scales, env constants, network
shape) and ``hparams.json`` (the PPO hyperparameters, for a warm start). The backtest, the MLflow pyfunc and delivery all load it through :func:`load`,
so a served policy sees exactly the state it was trained on.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from tasks.errors import MissingInput
from trainers.config import EnvConfig
from trainers.nets import Actor
from trainers.state import StateScales, StockLayout, normalise_features, state_dim

WEIGHTS, META, HPARAMS = "policy.pt", "policy.json", "hparams.json"


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

    @property
    def state_dim(self) -> int:
        return state_dim(len(self.symbols), len(self.feature_names))

    def actor(self) -> Actor:
        """An untrained deterministic actor of this bundle's shape, to load weights into."""
        layout = StockLayout(len(self.symbols), len(self.feature_names), self.scales) if self.policy == "shared" else None
        return Actor(self.state_dim, len(self.symbols), tuple(self.net_dims), init_log_std=0.0, layout=layout)

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


def save(folder: Path, actor: dict[str, torch.Tensor], meta: PolicyMeta,
         hparams: dict[str, float] | None = None) -> None:
    """Write the bundle; ``hparams`` (the policy's PPO hyperparameters) let the next
    continuous-training cycle warm-start a population from it."""
    torch.save(actor, folder / WEIGHTS)
    (folder / META).write_text(meta.to_json())
    if hparams is not None:
        (folder / HPARAMS).write_text(json.dumps(hparams, indent=1))


def load_hparams(folder: Path) -> dict[str, float] | None:
    """The bundle's PPO hyperparameters, or None for a bundle saved before they were kept."""
    path = folder / HPARAMS
    return {k: float(v) for k, v in json.loads(path.read_text()).items()} if path.exists() else None


def load(folder: Path) -> tuple[Actor, PolicyMeta]:
    """Rebuild the deterministic actor and its constants from a bundle folder."""
    if not (folder / WEIGHTS).exists():
        raise MissingInput(f"{folder / WEIGHTS}: not found (run `podracer train` first)")
    meta = PolicyMeta.from_json((folder / META).read_text())
    actor = meta.actor()
    actor.load_state_dict(torch.load(folder / WEIGHTS, map_location="cpu", weights_only=True))
    actor.eval()
    return actor, meta
