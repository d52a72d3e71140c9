"""Finished studies, each ``python -m benchmarks.archive.NAME``; kept so the decision it made
can be reproduced, not rerun after every change. Their readings are in docs/benchmarks-archive.md
and docs/results-archive.md.

* ``ceiling``: a least-squares scorer through the agents' action, no RL. Decided: the agents
  decide every 5th bar (``env.decide_every``) and keep a 1% no-trade band (docs/results-archive.md,
  the ceiling);
* ``selection``: the best validation snapshot against ensembles of snapshots. Decided: the
  pipeline keeps registering the best validation snapshot; no ensemble of one run's snapshots
  (docs/results-archive.md);
* ``nitro``: Nitro's boosted env counts against static ones at an equal budget. Decided: Nitro
  stays off by default (``nitro.enabled: false``; docs/evolution.md, Nitro);
* ``train_freq``: env steps/s on minute bars beside daily, same config. Decided: minute bars
  train within the 2x target of daily, with held bars skipped (docs/training.md, Minute bars).
"""
