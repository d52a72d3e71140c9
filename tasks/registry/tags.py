"""The names of the tags a shadow's registry version carries (:mod:`tasks.registry.shadow` writes
them, ``podracer status`` reads them), and MLflow's cap on a tag's length. A module of
constants only, so that a reader imports neither the gate nor Prefect (docs/operations.md,
the gate)."""

SINCE, TESTED, BARS, DIFF, P_VALUE, LINE = (
    "shadow_since", "shadow_tested", "shadow_bars", "shadow_sharpe_diff", "shadow_p", "shadow_line")
RETIRED, RETIRED_WHY = "shadow_retired", "shadow_retired_reason"
"""A retired shadow: the date (the last bar of the window of the cycle that retired it), and why."""
MAX_TAG = 5000
"""MLflow caps a tag value's length."""
