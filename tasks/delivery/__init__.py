"""Stage 7, from the champion to a paper account: the broker and the orders it fills.

``deliver`` loads the champion from the registry, builds its state for the latest bar
and submits its orders; ``broker`` is the local paper account that fills them. This is
the top of ``tasks/``: nothing else here imports it.
"""
