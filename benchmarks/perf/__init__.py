"""Performance benchmarks (docs/benchmarks.md), each ``python -m benchmarks.perf.NAME``:

* ``data``: ingest, validate and features: rows/s and peak memory, daily and minute bars;
* ``train``: env steps/s and PPO samples/s against FinRL's env and Stable-Baselines3
  (``baselines``: the FinRL + SB3 side);
* ``population``: a population as one batched model against one agent after another;
* ``broker``: the paper broker's orders/s, one trading-loop cycle, ``podracer broker``'s start
  (``broker_cycle``, ``broker_start``: its parts);
* ``cycle``: data event → CT cycle → champion → orders, as a user runs it;
* ``heal``: ``podracer up``'s supervisor with services killed;
* ``wrds``: the WRDS TAQ client's memory as the range of trades grows;
* ``paper``: the paper's scale (100 stocks × 10 years of minutes) end to end on the CPU;
* ``gpu``: everything the GPU workers need measured, in one script for a GPU lease
  (``gpu_common``, ``gpu_market``, ``gpu_train``, ``gpu_baselines``: its sections and inputs,
  torch and numpy only; ``gpu_report``: its run into docs/benchmarks.md, on this machine);
  ``gpu_update`` (its update section) and ``gpu_kernel`` also run here: the update's bytes, and
  the update kernel's builds compiled for an H100 with the ceiling their instructions set.

Imports nothing, so ``python3 -m benchmarks.perf.gpu`` runs where only torch and numpy are.
"""
