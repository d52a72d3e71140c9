"""The CT cycle's record: a cycle with nothing new ends early in one line."""

from tasks.data.arrivals import simulate
from tasks.data.ingest import ingest
from tasks.model.ct_record import nothing_new, record_processed


def test_a_cycle_with_nothing_new_ends_early_in_one_line(built_copy):
    params = built_copy
    ingested = ingest(params, latest=True)
    version = ingested.data_version
    assert nothing_new(params, ingested, None) is None  # no cycle and no champion yet
    why = nothing_new(params, ingested, champion_data_version=version)
    assert why == f"nothing new since data version {version[:8]} (last bar 2021-12-31): the cycle ends here"
    record_processed(params, version, {})
    assert nothing_new(params, ingested, None) == why  # the last cycle's version counts too
    simulate(params, 1)
    assert nothing_new(params, ingest(params, latest=True), version) is None
