"""Wiring only: the Prefect flow and the ``podracer`` CLI compose the stages in ``tasks/``."""
