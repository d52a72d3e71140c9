"""The trading client: the champion's orders sent to a broker through alpaca-py (docs/delivery.md).

``loop`` (one cycle: champion, reconciliation, decision, risk checks, orders, fills),
``risk`` (the pre-trade checks and the kill switch), ``journal`` (the client's own record of
each cycle), ``session`` (the broker client, journal and MLflow run a loop trades in),
``deliver`` (the one delivery cycle, which records what it delivered), ``live`` (the loop
that trades every new bar, and the kill switch), ``replay`` (the parity proof), ``bars`` (how a
bar is named: its date, or its minute) and ``local`` (starting a local broker, the only import
from the broker package).
"""
