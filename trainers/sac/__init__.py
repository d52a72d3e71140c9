"""Soft Actor-Critic, the off-policy learner of a mixed pool (elegantrl-podracers §4).

``sac.py`` holds the agent, its replay buffer and its update, read top to bottom like
CleanRL's ``sac_continuous_action.py``; ``runner.py`` its job runner, under the same schedule
and evaluator as a PPO job.
"""
