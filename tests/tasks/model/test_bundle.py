"""Policy bundles that hold an ensemble: saved and loaded they act the same, bundles saved
before ensembles still load, and an ensemble or a non-PPO champion is no PPO warm start."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from standins.tiny import tiny_params
from tasks.model import bundle
from tasks.model.plan import state_scales
from tasks.model.walkforward import warm_start
from tests.tasks.handmade import ensemble, policy
from tests.tasks.model.test_walkforward import ten_bars
from trainers.common.nets import Actor
from trainers.config import EnvConfig
from trainers.population.ensemble import Ensemble

SYMBOLS, FEATURES = ["AAA", "BBB"], ["rsi_30"]


def trained_like(kind: str = "mlp") -> tuple[Ensemble, bundle.PolicyMeta]:
    """A two-member ensemble of different shapes and learners, with seeded random weights."""
    _, single = policy(SYMBOLS, FEATURES, [0.0, 0.0], EnvConfig(action="weights"), kind=kind)
    meta = replace(single, members=[{"algorithm": "ppo", "net_dims": [4], "fitness": 0.12, "job": 3},
                                    {"algorithm": "sac", "net_dims": [8, 4], "fitness": 0.08, "job": 5}])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        ens = meta.actor()
    assert isinstance(ens, Ensemble)
    return ens, meta


def states(e: int = 6) -> torch.Tensor:
    return torch.rand(e, 1 + 2 * 2 + 2, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("kind", ["mlp", "shared"])
def test_an_ensemble_bundle_loads_and_acts_as_saved(tmp_path, kind):
    ens, meta = trained_like(kind)
    weights = bundle.ensemble_weights([m.state_dict() for m in ens.members])
    assert weights.keys() == ens.state_dict().keys()
    assert all(torch.equal(weights[k], v) for k, v in ens.state_dict().items())
    bundle.save(tmp_path, weights, meta)
    loaded, loaded_meta = bundle.load(tmp_path)
    assert loaded_meta == meta and loaded_meta.members[1] == {"algorithm": "sac", "net_dims": [8, 4],
                                                              "fitness": 0.08, "job": 5}
    assert isinstance(loaded, Ensemble) and loaded.action == "weights" and len(loaded.members) == 2
    assert [m.net[0].out_features for m in loaded.members] == [4, 8]  # each member of its own shape
    assert torch.equal(loaded(states()), ens(states()))
    assert torch.equal(loaded.member_actions(states()), ens.member_actions(states()))


def test_a_single_actor_bundle_saved_before_ensembles_still_loads(tmp_path):
    """A policy.json without ``algorithm`` and ``members`` is a PPO-trained single actor."""
    actor, meta = policy(SYMBOLS, FEATURES, [0.3, -0.2], EnvConfig())
    bundle.save(tmp_path, actor.state_dict(), meta)
    old = json.loads((tmp_path / bundle.META).read_text())
    del old["algorithm"], old["members"]
    (tmp_path / bundle.META).write_text(json.dumps(old))
    loaded, loaded_meta = bundle.load(tmp_path)
    assert type(loaded) is Actor and (loaded_meta.algorithm, loaded_meta.members) == ("ppo", [])
    assert loaded_meta == meta
    assert torch.equal(loaded(states()), actor(states()))


def champion(tmp_path, params, **changes) -> bundle.PolicyMeta:
    """A champion that fits ``ten_bars`` and ``params`` in all but ``changes``, saved with hparams."""
    fs = ten_bars()
    actor, meta = policy(["AAA"], FEATURES, [0.3], EnvConfig())
    meta = replace(meta, scales=state_scales(params, fs), **changes)
    weights = actor.state_dict()
    if meta.members:
        weights = bundle.ensemble_weights([weights] * len(meta.members))
    tmp_path.joinpath("champ").mkdir(exist_ok=True)
    bundle.save(tmp_path / "champ", weights, meta, params.ppo.hparams())
    return meta


def test_an_ensemble_or_a_non_ppo_champion_is_no_warm_start(tmp_path):
    params = tiny_params(tmp_path, "ppo.net_dims=[4]")
    member = {"algorithm": "ppo", "net_dims": [4], "fitness": 0.1, "job": 0}
    champion(tmp_path, params, members=[member] * 4)
    assert warm_start(params, ten_bars(), tmp_path / "champ") == (None, "the champion is an ensemble of 4 agents")
    champion(tmp_path, params, algorithm="sac")
    assert warm_start(params, ten_bars(), tmp_path / "champ") == (None, "the champion was trained by sac")
    champion(tmp_path, params)
    assert warm_start(params, ten_bars(), tmp_path / "champ")[1] == "warm start from the champion"


def test_the_handmade_ensemble_is_a_bundle_shape():
    """tests/tasks/handmade.py's ensemble loads into its own meta's module (what serving tests rely on)."""
    ens, meta = ensemble(SYMBOLS, FEATURES, [[0.1, 0.2], [0.3, 0.4]], EnvConfig(action="shares"))
    fresh = meta.actor()
    fresh.load_state_dict(ens.state_dict())
    assert isinstance(fresh, Ensemble) and fresh.action == "shares"
    assert torch.equal(fresh(states()), ens(states()))
