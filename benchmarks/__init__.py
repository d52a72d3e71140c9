"""Benchmarks a user can rerun, each a module run from the repository root with
``python -m benchmarks.FOLDER.NAME`` (``make bench`` lists them; docs/benchmarks.md holds each
one's latest reading and the command that reproduces it, docs/history/KEY.csv every run's row).

* :mod:`benchmarks.perf`: performance benchmarks, rerun after a change that could move them;
* :mod:`benchmarks.evidence`: the evidence runs behind docs/results.md (many seeds, hours);
* :mod:`benchmarks.archive`: finished studies, kept to reproduce the decision each made;
* :mod:`benchmarks.common`: a market through stages 1–3, seed lists, the docs' sections and history;
* :mod:`benchmarks.history`: every benchmark's history as tables (docs/history/README.md);
* :mod:`benchmarks.rules`: the rule portfolios (momentum, the oracle) several of them trade.

This package and :mod:`benchmarks.perf` import nothing: the GPU device script
(``python3 -m benchmarks.perf.gpu``) runs on a bare GPU machine with only torch and numpy,
from an uninstalled checkout (docs/training.md, GPU workers).
"""
