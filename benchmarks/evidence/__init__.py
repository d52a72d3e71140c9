"""Evidence runs (docs/results.md): many seeds, held-out windows, paired statistics; each
``python -m benchmarks.evidence.NAME``, hours on 2 cores, results written as JSON under
docs/results/ and tabled from there.

* ``results`` (tables: ``results_report``): the champion against a vanilla agent, momentum,
  an oracle and buy-and-hold on learnable, null and real markets;
* ``algorithms`` (tables: ``algorithms_report``): PPO, SAC, a mixed pool and ensembles at equal
  env steps;
* ``gate``: the promotion gate's size, power and payoff (``gate_calibrate``: its test where the
  truth is known; ``gate_sim``: a year of nightly CT gates on rule portfolios; ``gate_twins``
  and ``gate_twins_sim``: the CT gate's real near-twin challengers, measured and simulated);
* ``default_runs``: how often ``podracer run`` as shipped promotes, seed by seed.
"""
