"""The names of the tags a shadow's and a champion's registry versions carry (the shadow's
record, :mod:`tasks.registry.shadow`; the champion's promise and live watch,
:mod:`tasks.delivery.client.watch`), which ``podracer status`` reads, and MLflow's cap on a tag's
length. A module of constants only, so that a reader imports neither the gate nor Prefect
(docs/operations.md, the gate and the watch)."""

SINCE, TESTED, BARS, DIFF, P_VALUE, LINE = (
    "shadow_since", "shadow_tested", "shadow_bars", "shadow_sharpe_diff", "shadow_p", "shadow_line")
RETIRED, RETIRED_WHY = "shadow_retired", "shadow_retired_reason"
"""A retired shadow: the date (the last bar of the window of the cycle that retired it), and why."""
MAX_TAG = 5000
"""MLflow caps a tag value's length."""

PROMISE_MEAN, PROMISE_SE, PROMISE_BARS = "promise_mean", "promise_se", "promise_bars"
"""What a version's gate window showed of its active return over buy-and-hold, per bar
(:class:`tasks.registry.decay.Promise`): the live watch's reference."""
WATCH_SINCE, WATCH_BARS, WATCH_VERDICT, WATCH_LINE, WATCH_ACTION = (
    "watch_since", "watch_bars", "watch_verdict", "watch_line", "watch_action")
"""The champion's live watch (:mod:`tasks.delivery.client.watch`): the bar its record starts
at (its first bar as champion, again after a rollback or a hand move), the record's length at
the latest look, its verdict (holds, decay, severe decay, fault), its line, and what the watch
did about it."""
SAFE = "safe_policy"
"""A registered-model tag: set while no version trades because the watch went flat, with why."""
DRIFT = "drift_line"
"""The champion's input drift, one line (:mod:`tasks.data.drift`): a warning, never an action."""
