"""Pure-PyTorch training layer (finrl-podracer §4.4): environment, PPO and evolution.

Nothing here imports Prefect or MLflow: functions take arrays and typed configs and
return weights and metrics, so the same code runs in a flow, under DVC, or in a notebook.
"""
