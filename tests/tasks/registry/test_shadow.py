"""What :func:`tasks.registry.shadow.settle` leaves in the registry for each decision, on bare
versions of a throwaway store (the CT cycle's end-to-end test trades a real shadow)."""

from tasks.registry.evidence import Evidence
from tasks.registry.gate import CHALLENGER, CHAMPION, PREVIOUS, SHADOW, Decision, ShadowFate, promote
from tasks.registry.shadow import settle
from tasks.registry.tags import BARS, DIFF, LINE, P_VALUE, RETIRED, SINCE, TESTED
from tasks.registry.store import client

WINDOW = (Evidence("buy_and_hold", 63, 0.3, -0.5, 1.1, 0.3, 0.5),)
RECORD = (Evidence("champion", 42, 1.2, 0.4, 2.0, 0.012, 0.5), Evidence("buy_and_hold", 42, 0.9, 0.1, 1.7, 0.03, 0.5))


def aliases(registry) -> dict[str, str]:
    return {a: str(v) for a, v in client(registry).get_registered_model(registry.model_name).aliases.items()}


def tags(registry, version: str) -> dict[str, str]:
    return dict(client(registry).get_model_version(registry.model_name, version).tags)


def test_a_model_entering_shadow_carries_the_alias_and_where_its_record_starts(registry):
    promote(registry, "1")
    settle(registry, Decision("shadow", WINDOW), "2", "2022-03-31")
    assert aliases(registry) == {CHAMPION: "1", SHADOW: "2"}
    assert tags(registry, "2") == {SINCE: "2022-03-31", TESTED: "0"}
    settle(registry, Decision("refuse", WINDOW), "3", "2022-04-01")
    assert aliases(registry) == {CHAMPION: "1", SHADOW: "2"}  # a refused model leaves the shadow alone


def test_a_shadow_whose_record_passes_is_promoted_with_its_record_on_the_version(registry):
    promote(registry, "1")
    settle(registry, Decision("shadow", WINDOW), "2", "2022-03-31")
    fate = ShadowFate("2", "promote", RECORD, 42)
    settle(registry, Decision("refuse", WINDOW, fate), "3", "2022-05-31")
    assert aliases(registry) == {CHAMPION: "2", PREVIOUS: "1"}
    assert tags(registry, "2") == {SINCE: "2022-03-31", TESTED: "42", BARS: "42", DIFF: "0.9000", P_VALUE: "0.0300",
                                   LINE: fate.line}  # the binding benchmark: buy-and-hold's larger p
    assert fate.line.startswith("shadow version 2 promoted to champion: vs champion: ΔSharpe +1.20")


def test_a_retired_shadow_loses_the_alias_and_a_newer_one_takes_it(registry):
    promote(registry, "1")
    settle(registry, Decision("shadow", WINDOW), "2", "2022-03-31")
    client(registry).set_registered_model_alias(registry.model_name, CHALLENGER, "3")
    fate = ShadowFate("2", "retire", RECORD, 21)
    settle(registry, Decision("shadow", WINDOW, fate), "3", "2022-04-29")
    assert aliases(registry) == {CHAMPION: "1", SHADOW: "3", CHALLENGER: "3"}
    assert tags(registry, "2")[RETIRED] == "2022-04-29" and tags(registry, "3")[SINCE] == "2022-04-29"


def test_a_kept_shadow_gets_its_latest_record_and_keeps_its_alias(registry):
    settle(registry, Decision("shadow", WINDOW), "2", "2022-03-31")
    settle(registry, Decision("refuse", WINDOW, ShadowFate("2", "keep", RECORD, 0)), "3", "2022-04-08")
    assert aliases(registry) == {SHADOW: "2"}
    assert tags(registry, "2")[TESTED] == "0" and tags(registry, "2")[BARS] == "42"


def test_the_pipeline_promotes_its_new_model_directly(registry):
    settle(registry, Decision("promote", WINDOW), "1", "2021-12-31")
    assert aliases(registry) == {CHAMPION: "1"}
