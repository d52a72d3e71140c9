"""The population layer: how a run's agents are trained together (finrl-podracer §4.2–4.3,
elegantrl-podracers §3; docs/evolution.md).

``config.py`` holds the evolution's and the tournament's configs; ``modes.py`` is the table
of run modes; ``evolution.py`` and ``tournament.py`` are the two modes' runs;
``selection.py`` their search space and selector; ``dispatch.py`` the setting a run's jobs
share and the one entry point that trains any job; ``ensemble.py`` the leaders of a run
served as one policy. The package imports nothing itself, so a config is validated against
the table without torch.
"""
