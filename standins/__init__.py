"""Small local stand-ins for what the pipeline meets at full size, shared by tests/ and benchmarks/.

* :mod:`standins.postgres`: a throwaway PostgreSQL with WRDS-shaped tables, for the WRDS
  adapter (docs/data.md, sources, WRDS) without an account;
* :mod:`standins.tiny`: the tiny config, every stage in seconds (docs/testing.md).

Why a package of its own rather than ``tests/`` or ``tasks/``: the benchmarks (a package a user
runs, docs/benchmarks.md) need both, and a runnable program must not import the test suite;
yet neither is part of the shipped pipeline, so ``flows/``, ``tasks/`` and ``trainers/`` never
import it (tests/tasks/test_layout.py). It sits above ``tasks`` in the layering: it may import
``tasks.config``, nothing imports it but tests and benchmarks. The stand-ins only tests use
(the Alpaca fakes) stay in ``tests/standins/``.
"""
