"""The names of the tags a shadow's registry version carries (:mod:`tasks.registry.shadow` writes
them, ``podracer status`` reads them). A module of names only, so that a reader imports
neither the gate nor Prefect (docs/operations.md, the gate)."""

SINCE, TESTED, BARS, DIFF, P_VALUE, LINE = (
    "shadow_since", "shadow_tested", "shadow_bars", "shadow_sharpe_diff", "shadow_p", "shadow_line")
RETIRED = "shadow_retired"
