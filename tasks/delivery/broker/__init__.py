"""The local paper broker: an Alpaca-compatible HTTP service over one SQLite ledger (docs/delivery.md).

``api`` (the FastAPI app on Alpaca's Trading API v2 paths), ``paper`` (the account's
orders, fills and clock as plain methods), ``ledger`` (the books), ``fills`` (the training
env's fill rule), ``clock`` (the NYSE calendar), ``feed`` (the validated bars as prices),
``orders`` (Alpaca's request checks and JSON shapes) and ``service`` (the server process:
``podracer broker`` in the foreground, or :func:`~tasks.delivery.broker.service.start` in a
thread). Only ``service`` is public: clients reach the rest over HTTP.
"""
