"""Proximal Policy Optimization, the paper's learner (finrl-podracer §4.4), read top to bottom.

``agent.py`` holds a PPO agent's learners and their state; ``ppo.py`` the one PPO update,
rollout and GAE(λ) included; ``batched.py`` and ``schedule.py`` the batched networks, Adam
and the rollout's bookkeeping that let many agents share those kernels; ``nitro.py`` Nitro's
boosting, which reads PPO's surrogate; ``multiplex.py`` the job runner that trains a
generation's PPO agents as one batched model.
"""
