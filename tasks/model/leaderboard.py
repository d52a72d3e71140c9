"""The evolution's leaderboard: its table, its lineage / fitness-over-time plot, and its
MLflow nested runs (finrl-podracer §4.2, Fig. 7's evolution of agents).

The train stage writes ``leaderboard.csv`` and ``evolution.png`` beside the model; the
register stage turns the table into one nested MLflow run per agent per generation under
the pipeline's run, so the MLflow UI shows every agent's hyperparameters and fitness.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from trainers.algorithms import DEFAULT_LEARNER
from trainers.population.evolution import EvolutionResult
from trainers.population.modes import MODES

LEADERBOARD = "leaderboard.csv"
PLOT = "evolution.png"
MARKERS = {"ppo": "o", "sac": "s"}
"""The plot's marker of each learner."""
META = ("generation", "agent", "iteration", "fitness", "parent", "stopped", "env_steps", "algorithm")


def table(result: EvolutionResult) -> pd.DataFrame:
    """One row per evaluation of every agent: fitness, its learner (``algorithm``),
    hyperparameters and lineage. A mixed pool's rows leave the other learner's hyperparameters empty."""
    rows = [{**{k: v for k, v in asdict(r).items() if k != "hparams"}, **r.hparams} for r in result.history]
    return pd.DataFrame(rows)


def plot(board: pd.DataFrame, path: Path, fitness: str = "sharpe", mode: str = "generational",
         model: tuple[int, int, float] | None = None) -> None:
    """Fitness over training time with the lineage drawn in, and the registered policy ringed:
    ``model``, its (generation, agent, fitness), at that agent's evaluation in that generation
    nearest its fitness (the final population's best is rarely the best evaluation;
    docs/evolution.md); None, or no such evaluation: the best evaluation.

    Generational: one colour per agent slot; a slot's line breaks where the selector replaced
    it, and a dashed line joins the copy to its parent. A pooled mode (a tournament): one
    short line per job at the time it finished, coloured by lineage depth, a dashed line from
    its parent job."""
    figure = Figure(figsize=(10, 4.5), layout="constrained")
    axes = figure.add_subplot()
    per_job = int(board["iteration"].max())
    pooled = MODES[mode].pooled
    if pooled:  # x: finishing order of the jobs, whose ids are in "agent"
        order = {job: k for k, job in enumerate(dict.fromkeys(board["agent"]))}
        board = board.assign(x=board["agent"].map(order) + board["iteration"] / per_job)
        segments = [(rows, f"C{int(rows['generation'].iloc[0]) % 10}", board[board["agent"] == rows["parent"].iloc[0]])
                    for _, rows in board.groupby("agent", sort=False)]
        xlabel = "jobs finished"
        title = "Tournament: each job's fitness; colour = lineage depth, dashed = from its parent"
    else:
        board = board.assign(x=board["generation"] + board["iteration"] / per_job)
        segments = []
        for agent, rows in board.groupby("agent", sort=True):
            copied = rows["parent"].notna() & (rows["generation"] != rows["generation"].shift())
            for _, segment in rows.groupby(copied.cumsum()):
                first = segment.iloc[0]
                parent = board[(board["generation"] == first["generation"] - 1) & (board["agent"] == first["parent"])]
                segments.append((segment, f"C{int(agent) % 10}", parent))
        xlabel, title = "generations trained", "Evolution: fitness over time; dashed = copied from a top agent"
    labelled: set[str] = set()
    for rows, colour, parent in segments:
        label = None if colour in labelled or pooled else f"agent {rows['agent'].iloc[0]}"
        labelled.add(colour)
        marker = MARKERS.get(str(rows["algorithm"].iloc[0]) if "algorithm" in rows else DEFAULT_LEARNER, "o")
        axes.plot(rows["x"], rows["fitness"], f"{marker}-", color=colour, markersize=4, label=label)
        if len(parent):  # join the copy to its parent's last evaluation
            axes.plot([parent["x"].iloc[-1], rows["x"].iloc[0]], [parent["fitness"].iloc[-1], rows["fitness"].iloc[0]],
                      "--", color=colour, linewidth=0.8)
    learners = sorted(set(board["algorithm"])) if "algorithm" in board else []
    for learner in learners if len(learners) > 1 else []:  # a mixed pool: which marker is which learner
        axes.plot([], [], MARKERS.get(learner, "o"), color="black", label=learner.upper())
    chosen = model_row(board, model)
    axes.scatter([chosen["x"]], [chosen["fitness"]], s=120, facecolors="none", edgecolors="black",
                 label="the registered policy", zorder=5)
    axes.set(xlabel=xlabel, ylabel=f"validation {fitness}", title=title)
    figure.legend(fontsize=7, loc="outside right upper")  # beside the axes, never over a line
    figure.savefig(path, dpi=100)


def model_row(board: pd.DataFrame, model: tuple[int, int, float] | None) -> pd.Series:
    """The leaderboard row where the registered policy was evaluated (:func:`plot`'s ring)."""
    if model is not None:
        generation, agent, score = model
        rows = board[(board["generation"] == generation) & (board["agent"] == agent) & board["fitness"].notna()]
        if len(rows):
            return rows.loc[(rows["fitness"] - score).abs().idxmin()]
    return board.loc[board["fitness"].idxmax()]


def log_nested_runs(board: pd.DataFrame) -> None:
    """One nested MLflow run per agent per generation under the active run: its learner,
    hyperparameters and parent as params, its fitness at each iteration as a metric."""
    import mlflow  # lazily, like the register stage: the train stage imports this module

    active = mlflow.active_run()
    assert active is not None, "log_nested_runs needs an active parent run"
    for (generation, agent), rows in board.groupby(["generation", "agent"], sort=True):
        first = rows.iloc[0]
        algorithm = str(first.get("algorithm", DEFAULT_LEARNER))
        with mlflow.start_run(run_name=f"gen{generation}-agent{agent}-{algorithm}", nested=True,
                              experiment_id=active.info.experiment_id):
            hparams = {k: v for k, v in first.items() if k not in META and not pd.isna(v)}
            parent = "" if pd.isna(first["parent"]) else str(int(first["parent"]))
            mlflow.log_params({**hparams, "generation": generation, "agent": agent, "parent": parent,
                               "algorithm": algorithm})
            for _, row in rows.iterrows():
                mlflow.log_metric("fitness", float(row["fitness"]), step=int(row["iteration"]))
            mlflow.set_tag("stopped", str(bool(rows["stopped"].iloc[-1])))
