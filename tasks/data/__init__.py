"""Stages 1-3, from a source to the arrays training reads: bars in, features out.

``sources/`` holds the adapters (file, Yahoo, WRDS, Alpaca, arch-demo) and the
``synthetic*`` modules the embedded default market; ``ingest`` writes their bars, in the
contract of ``bars``, to ``data/raw/``. ``validate`` runs the Great Expectations suite
and the calendar, order, gap and outlier ``checks``, sending bad rows to quarantine.
``features`` computes the indicators (with the market-wide ``risk`` indicators), the
date splits and the train-only normalisation into ``data/features/``. Nothing here
imports the model, registry or delivery parts.
"""
