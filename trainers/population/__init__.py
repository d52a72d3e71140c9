"""The population layer: how a run's agents are trained together (finrl-podracer.txt §4.2–4.3,
elegantrl-podracers.txt §3; docs/evolution.md).

``evolution.py`` and ``tournament.py`` are the two run modes; ``selection.py`` their search
space and selector; ``dispatch.py`` the setting a run's jobs share and the one entry point
that trains any job; ``ensemble.py`` the leaders of a run served as one policy. The package
imports nothing itself.
"""
