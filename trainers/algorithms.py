"""The learners a run can train, in one table: :data:`ALGORITHMS` maps a learner's name (as
``tournament.algorithms`` and ``params.yaml``'s sections spell it) to what the population
layer needs of it (elegantrl-podracers §3: a pool of agents "initialized with different
DRL algorithms"; docs/evolution.md, A pool of several algorithms).

Nothing outside this module tests a learner's name: the population layer, the train stage
and the benchmarks look a learner up here. The module imports no torch, so validating a
config (``tasks/config.py``) stays cheap; each learner's agent and job runner are imported
when first used.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from trainers.config import PPOConfig, SACConfig
from trainers.population.config import EvolutionConfig

if TYPE_CHECKING:
    import torch

    from trainers.common.jobs import AgentJob, JobSetting
    from trainers.ppo.agent import PPOAgent
    from trainers.sac.sac import SACAgent

Config = PPOConfig | SACConfig
SearchSpace = dict[str, tuple[float, float]]

DEFAULT_LEARNER = "ppo"
"""The learner of the generational mode (finrl-podracer §4.2's PPO population), of a warm
start and of a pool that names none."""


@dataclass(frozen=True)
class Algorithm:
    """One learner: its config, where its hyperparameters are searched, how to build its agent,
    where its policy sits in the agent's state, and the runner that trains its jobs."""

    name: str
    config: type[PPOConfig] | type[SACConfig]
    """The class of its ``params.yaml`` section (the section named ``name``)."""
    base: Callable[[JobSetting], Config]
    """Its base config in a run's setting; an agent's hyperparameters apply to it."""
    search_space: Callable[[EvolutionConfig, Config], SearchSpace]
    """The bounds its agents are drawn from and explored within, from ``evolution`` and its own config."""
    agent: Callable[[JobSetting, Mapping[str, float], int, dict[str, Any] | None], PPOAgent | SACAgent]
    """``agent(setting, hparams, seed, state)``: an agent on the setting's training window with
    ``hparams`` applied to its base config, fresh or restored from ``state``."""
    actor_weights: Callable[[dict[str, Any]], dict[str, torch.Tensor]]
    """A copy of the policy's weights in an agent's ``state_dict()``."""
    run: Callable[[AgentJob, JobSetting], AgentJob]
    """Trains one job (the input unchanged), on the setting's device."""
    iteration: Callable[[JobSetting, int], Callable[[], object]]
    """``iteration(setting, seed)``: one training iteration of a fresh agent of the base config,
    as its runner trains it, to call again and again: the profiler's calibration workload
    (trainers/profiler.py, :func:`~trainers.profiler.profiled`; docs/training.md)."""


def _ppo_agent(setting: JobSetting, hparams: Mapping[str, float], seed: int,
               state: dict[str, Any] | None) -> PPOAgent:
    from trainers.ppo.agent import PPOAgent

    return PPOAgent.of(setting, hparams, seed, state)


def _ppo_policy(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    from trainers.ppo.agent import policy_weights

    return policy_weights(state)


def _ppo_run(job: AgentJob, setting: JobSetting) -> AgentJob:
    """A PPO job is a population of one on the multiplexed engine."""
    from trainers.ppo.multiplex import run_multiplexed

    return run_multiplexed([job], setting)[0]


def _ppo_iteration(setting: JobSetting, seed: int) -> Callable[[], object]:
    """A PPO agent's iteration on the multiplexed engine, a population of one."""
    from trainers.ppo.multiplex import Multiplexed

    engine = Multiplexed(setting, [_ppo_agent(setting, {}, seed, None)])
    return lambda: engine.train_iteration([0])


def _sac_agent(setting: JobSetting, hparams: Mapping[str, float], seed: int,
               state: dict[str, Any] | None) -> SACAgent:
    from trainers.sac.sac import SACAgent

    return SACAgent.of(setting, hparams, seed, state)


def _sac_run(job: AgentJob, setting: JobSetting) -> AgentJob:
    from trainers.sac.runner import run_off_policy

    return run_off_policy(job, setting)


def _sac_iteration(setting: JobSetting, seed: int) -> Callable[[], object]:
    return _sac_agent(setting, {}, seed, None).train_iteration


ALGORITHMS: Mapping[str, Algorithm] = {learner.name: learner for learner in (
    Algorithm(name="ppo", config=PPOConfig, base=attrgetter("ppo_cfg"),
              search_space=lambda evolution, cfg: evolution.search_space, agent=_ppo_agent,
              actor_weights=_ppo_policy, run=_ppo_run,
              iteration=_ppo_iteration),
    Algorithm(name="sac", config=SACConfig, base=attrgetter("sac_cfg"),
              search_space=lambda evolution, cfg: cfg.search_space, agent=_sac_agent,
              actor_weights=lambda state: copy.deepcopy(state["actor"]), run=_sac_run,
              iteration=_sac_iteration),
)}
"""Every learner, by name: PPO (``trainers/ppo``; its search space is ``evolution.search_space``)
and SAC (``trainers/sac``; ``sac.search_space``)."""


def config_of(sections: object, name: str) -> Config:
    """Learner ``name``'s config among ``params.yaml``'s sections (``params.ppo``, ``params.sac``):
    each learner's section is named after it."""
    config = getattr(sections, ALGORITHMS[name].name)
    assert isinstance(config, ALGORITHMS[name].config), f"{name}: not a {ALGORITHMS[name].config.__name__}"
    return config


def check_names(names: Iterable[str], where: str = "tournament.algorithms") -> None:
    """Raise ``ValueError`` (one line) unless every name is a learner of :data:`ALGORITHMS`."""
    for name in names:
        if name not in ALGORITHMS:
            raise ValueError(f"{where}.{name} is not one of {', '.join(ALGORITHMS)}")
