"""Stage 7, from the champion to a paper account, in two parts that meet only over HTTP.

``broker/`` is the local paper broker, a service that speaks Alpaca's Trading API: its API,
ledger, fills, clock, feed and order shapes, and the server process. ``client/`` is the
trading client: the loop, its risk checks and journal, the replay, and ``deliver`` (one
cycle). The client talks to any broker through alpaca-py's ``TradingClient``; its one other
door is :mod:`tasks.delivery.client.local`, which starts a local broker through the broker's
public :func:`tasks.delivery.broker.service.start` (docs/delivery.md). ``keys.py`` holds the
API keys both ends of the wire use. This is the top of ``tasks/``: nothing else here imports it.
"""
