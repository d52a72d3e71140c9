import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from standins.tiny import TINY
from tasks.config import load_params
from tasks.model import bundle
from tasks.model.backtest import backtest
from tasks.model.leaderboard import LEADERBOARD, PLOT
from tasks.model.train import SUMMARY, GenerationLog, TrainResult, train
from trainers.population.ensemble import Ensemble


def test_train_writes_a_bundle_serving_can_load(built):
    actor, meta = bundle.load(built.dirs.models)
    assert meta.symbols == [f"SYN00{i}" for i in range(4)]
    assert meta.env == built.env and len(meta.net_dims) == 1 and 12 <= meta.net_dims[0] <= 20  # evolved width
    assert len(meta.data_version) == 16
    out = actor(torch.zeros(1, meta.state_dim))
    assert out.shape == (1, 4) and bool((out.abs() < 1).all())
    board = pd.read_csv(built.dirs.models / LEADERBOARD)
    assert len(board) == built.evolution.population * built.evolution.generations
    assert {"generation", "agent", "iteration", "fitness", "parent", "stopped", "lr", "net_width"} <= set(board.columns)
    assert (built.dirs.models / PLOT).read_bytes()[:4] == b"\x89PNG"


def test_training_is_bit_identical_for_the_same_seed(built_copy):
    first = torch.load(built_copy.dirs.models / bundle.WEIGHTS, weights_only=True)
    result = train(built_copy)
    again = torch.load(built_copy.dirs.models / bundle.WEIGHTS, weights_only=True)
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert result.env_steps == 2 * 2 * 1 * 4 * 16


def test_profiled_training_writes_the_breakdown_and_changes_nothing(built_copy):
    first = torch.load(built_copy.dirs.models / bundle.WEIGHTS, weights_only=True)
    result = train(built_copy.model_copy(update={"train": built_copy.train.model_copy(update={"profile": True})}))
    again = torch.load(built_copy.dirs.models / bundle.WEIGHTS, weights_only=True)
    assert all(torch.equal(first[k], again[k]) for k in first)  # profiling observes, never steers
    assert result.profile == built_copy.dirs.models / "profile.png"
    assert result.profile.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = pd.read_csv(built_copy.dirs.models / "profile.csv")
    ops = set(zip(rows["phase"], rows["operation"]))
    assert {("training", "simulation"), ("training", "inference"), ("training", "backprop"),
            ("evaluation", "simulation")} <= ops
    assert (rows["seconds"] >= 0).all() and rows["calls"].sum() > 0


def test_tournament_mode_trains_through_the_stage_and_logs_its_cost(built_copy):
    params = built_copy.model_copy(update={
        "evolution": dataclasses.replace(built_copy.evolution, mode="tournament"),
        "tournament": dataclasses.replace(built_copy.tournament, workers=2, jobs=3, leaderboard_size=2)})
    result = train(params)
    board = pd.read_csv(params.dirs.models / LEADERBOARD)
    assert sorted(board["agent"].unique()) == [0, 1, 2]  # one row per job (tiny: one evaluation each)
    assert (board["parent"].notna() & (board["generation"] > 0)).any()  # a job generated from the leaderboard
    summary = json.loads((params.dirs.models / SUMMARY).read_text())
    assert summary["mode"] == "tournament" and summary["env_steps"] == result.env_steps > 0
    assert summary["cpu_seconds"] > 0
    assert (params.dirs.models / PLOT).read_bytes()[:4] == b"\x89PNG"


def test_a_mixed_pool_registers_its_top_agents_as_one_ensemble(built_copy):
    """PPO and SAC in one pool, leaderboard 2 rows each; ``registry.ensemble: 3`` must take the
    top 3 of those 4 rows, so both learners are in it, best first, and the backtest trades it."""
    params = load_params(Path("/nonexistent/params.yaml"), [
        *TINY, f"data_dir={built_copy.data_dir}", "evolution.mode=tournament", "tournament.workers=2",
        "tournament.jobs=6", "tournament.leaderboard_size=2", "tournament.algorithms={ppo: 0.5, sac: 0.5}",
        "sac.num_envs=4", "sac.horizon=16", "sac.batch_size=32", "sac.buffer_size=128", "sac.updates=2",
        "sac.net_dims=[16]", "sac.search_space={lr: [0.0001, 0.001], net_width: [12, 20]}", "registry.ensemble=3"])
    trained = train(params)
    assert trained.describe().endswith("; the model is an ensemble of the top 3")
    assert f"({trained.algorithm})" in trained.describe() and trained.algorithm in ("ppo", "sac")
    policy, meta = bundle.load(params.dirs.models)
    board = pd.read_csv(params.dirs.models / LEADERBOARD)
    assert set(board["algorithm"]) == {"ppo", "sac"}
    assert board.loc[board["algorithm"] == "sac", "clip"].isna().all()  # a SAC row has no PPO hyperparameters
    assert isinstance(policy, Ensemble) and len(policy.members) == 3 and meta.algorithm == "ensemble"
    last = board.groupby("agent").last()  # each job's final evaluation: its leaderboard fitness
    fitness = [m["fitness"] for m in meta.members]
    assert fitness == sorted(fitness, reverse=True)
    assert {m["algorithm"] for m in meta.members} == {"ppo", "sac"}
    for m in meta.members:
        assert last.loc[m["job"], "algorithm"] == m["algorithm"]
        assert last.loc[m["job"], "fitness"] == pytest.approx(m["fitness"], rel=1e-12)  # the CSV keeps 16 digits
    tested = backtest(params)
    assert tested.metrics["agent"]["sharpe"] == tested.metrics["agent"]["sharpe"]  # a number: the ensemble traded


def test_nitro_through_the_stage_keeps_the_budget(built_copy):
    params = built_copy.model_copy(update={
        "nitro": dataclasses.replace(built_copy.nitro, enabled=True, min_envs=2, max_envs=8, lanczos_steps=3,
                                     subset=16),
        "evolution": dataclasses.replace(built_copy.evolution, budget_env_steps=2 * 2 * 100),
        "train": built_copy.train.model_copy(update={"engine": "serial"})})
    result = train(params)
    assert 0 < result.env_steps <= 400
    board = pd.read_csv(params.dirs.models / LEADERBOARD)
    assert board["num_envs"].between(2, 8).all()


def test_a_resumed_runs_summary_rates_only_the_steps_it_ran():
    result = TrainResult(Path("m"), 1.5, 2, 3, {}, env_steps=259_584, seconds=9.0, device="cpu",
                         resumed_env_steps=180_000)
    assert result.session_env_steps == 79_584 and result.env_steps_per_second == pytest.approx(79_584 / 9.0)
    assert result.describe() == ("best validation sharpe 1.500 (agent 3, generation 2), 259,584 env steps, "
                                 "79,584 of them after resuming in 9s (generational on multiplexed, cpu)")
    fresh = TrainResult(Path("m"), 1.5, 2, 3, {}, env_steps=1_000, seconds=4.0, device="cpu")
    assert fresh.env_steps_per_second == 250.0 and "after resuming" not in fresh.describe()
    chosen = TrainResult(Path("m"), 1.5, 2, 3, {}, env_steps=1_000, seconds=4.0, device="cpu", evaluations=128,
                         luck=0.314)
    assert chosen.describe().endswith("cpu); the best of 128 evaluations would lead by 0.31 by luck alone")


def test_training_logs_one_line_per_generation_once_its_evaluations_are_in(tiny, caplog):
    evo = dataclasses.replace(tiny.evolution, population=3, generations=4, iterations_per_generation=2,
                              eval_interval=1)  # two evaluations per agent per generation
    lines = GenerationLog(evo, pooled=False)
    with caplog.at_level("INFO", logger="podracer.train"):
        for agent, fitness in [(0, 0.1), (0, 0.2), (1, 0.9), (1, 0.5), (2, 0.3)]:
            lines.add(0, agent, fitness)
        assert caplog.messages == []  # not before the generation's last evaluation
        lines.add(0, 2, 0.3)
        lines.add(1, 0, 0.7)
        lines.flush()  # a generation cut short still gets its line
    assert caplog.messages == ["generation 1/4: best validation sharpe 0.900 (agent 1), mean 0.383",
                               "generation 2/4: best validation sharpe 0.700 (agent 0), mean 0.700"]
    caplog.clear()
    jobs = GenerationLog(evo, pooled=True)
    with caplog.at_level("INFO", logger="podracer.train"):
        jobs.add(2, 5, 0.4)
        jobs.add(2, 5, 0.6)
    assert caplog.messages == ["job 5 (lineage depth 2): best validation sharpe 0.600"]


def test_the_update_kernel_on_a_cpu_is_refused_in_one_line_before_any_training(built_copy, monkeypatch):
    """``train.compile: kernel`` needs CUDA: on the CPU the stage says so, naming the setting,
    before it reads the market or trains anything."""
    from tasks.errors import ConfigError
    from tasks.model import train as stage

    monkeypatch.setattr(stage, "new_run", lambda *a, **k: pytest.fail("trained on a CPU with the kernel"))
    params = built_copy.model_copy(update={"train": built_copy.train.model_copy(update={"compile": "kernel"})})
    with pytest.raises(ConfigError) as err:
        train(params)
    message = str(err.value)
    assert "train.compile: kernel" in message and "cpu" in message and "\n" not in message
