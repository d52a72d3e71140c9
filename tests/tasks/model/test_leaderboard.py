"""A mixed pool's leaderboard in MLflow: every nested run names its learner and logs only
that learner's hyperparameters (docs/evolution.md, A pool of several algorithms)."""

import math

import pandas as pd

from tasks.model.leaderboard import log_nested_runs, model_row, plot


def mixed_board() -> pd.DataFrame:
    return pd.DataFrame([
        {"generation": 0, "agent": 0, "iteration": 1, "fitness": 0.5, "parent": math.nan, "stopped": False,
         "env_steps": 64, "algorithm": "ppo", "lr": 0.001, "clip": 0.2, "tau": math.nan},
        {"generation": 0, "agent": 1, "iteration": 1, "fitness": 0.7, "parent": math.nan, "stopped": False,
         "env_steps": 64, "algorithm": "sac", "lr": 0.0003, "clip": math.nan, "tau": 0.005},
        {"generation": 1, "agent": 2, "iteration": 1, "fitness": 0.8, "parent": 1.0, "stopped": False,
         "env_steps": 64, "algorithm": "sac", "lr": 0.0004, "clip": math.nan, "tau": 0.006},
    ])


def test_each_nested_run_names_its_learner_and_logs_its_own_hyperparameters(tmp_path):
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = mlflow.create_experiment("mixed", artifact_location=str(tmp_path / "artifacts"))
    with mlflow.start_run(experiment_id=experiment) as parent:
        log_nested_runs(mixed_board())
    runs = mlflow.search_runs([experiment], filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    got = {row["tags.mlflow.runName"]: row for _, row in runs.iterrows()}
    assert set(got) == {"gen0-agent0-ppo", "gen0-agent1-sac", "gen1-agent2-sac"}
    assert got["gen0-agent1-sac"]["params.algorithm"] == "sac" and got["gen0-agent0-ppo"]["params.algorithm"] == "ppo"
    assert got["gen0-agent1-sac"]["params.tau"] == "0.005" and pd.isna(got["gen0-agent1-sac"]["params.clip"])
    assert got["gen0-agent0-ppo"]["params.clip"] == "0.2" and pd.isna(got["gen0-agent0-ppo"]["params.tau"])
    assert got["gen1-agent2-sac"]["params.parent"] == "1"


def test_the_tournament_plot_marks_each_learner(tmp_path):
    plot(mixed_board(), tmp_path / "evolution.png", mode="tournament")
    assert (tmp_path / "evolution.png").read_bytes()[:4] == b"\x89PNG"


def test_the_ring_marks_the_registered_policy_not_the_best_evaluation():
    """The final population's best (generation 1, agent 0, fitness 0.6) is registered though
    generation 0's agent 1 scored 0.7: the ring goes on the former's evaluation."""
    board = pd.DataFrame([
        {"generation": 0, "agent": 0, "iteration": 1, "fitness": 0.5, "x": 0.5},
        {"generation": 0, "agent": 1, "iteration": 1, "fitness": 0.7, "x": 0.5},
        {"generation": 1, "agent": 0, "iteration": 1, "fitness": 0.55, "x": 1.5},
        {"generation": 1, "agent": 0, "iteration": 2, "fitness": 0.6, "x": 2.0},
        {"generation": 1, "agent": 1, "iteration": 2, "fitness": math.nan, "x": 2.0},
    ])
    assert model_row(board, (1, 0, 0.6))["x"] == 2.0
    assert model_row(board, None)["fitness"] == 0.7  # no model given: the best evaluation
    assert model_row(board, (5, 3, 0.6))["fitness"] == 0.7  # not on the board: the best evaluation
