"""Stages 4-5, from features to a tested policy: training, its scale-out, the backtest.

``train`` runs the population (``trainers/``) in this process or, through ``scaleout``,
as Prefect tasks on Dask; ``leaderboard`` tabulates and plots every evaluation;
``bundle`` is the policy bundle that training writes to ``data/models/`` (weights plus
every constant serving needs); ``backtest`` replays it on the test window beside
buy-and-hold. It reads the data part's outputs and never imports registry or delivery.
"""
