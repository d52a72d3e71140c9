"""What every learner shares: the market env and its state, the networks, the trading rules,
the metrics, the random draws, the recorded steps, the evaluator, the Gymnasium adapter and
an agent's job (docs/training.md, The market MDP).

Nothing here imports a learner (``trainers/ppo``, ``trainers/sac``) or the population layer.
"""
