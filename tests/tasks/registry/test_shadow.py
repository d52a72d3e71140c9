"""What :func:`tasks.registry.shadow.settle` and :func:`tasks.registry.shadow.record_look`
leave in the registry for each decision, on bare versions of a throwaway store, and a shadow
whose state cannot be read (the CT cycle's end-to-end test trades a real shadow)."""

import logging

import pytest

from standins.tiny import tiny_params
from tasks.errors import MissingInput
from tasks.model.walkforward import Champion
from tasks.registry.aliases import CHALLENGER, CHAMPION, PREVIOUS, SHADOW, promote
from tasks.registry.decision import Decision, ShadowFate
from tasks.registry.evidence import Evidence
from tasks.registry.shadow import Shadow, current_shadow, record_look, settle, shadow_record
from tasks.registry.store import client
from tasks.registry.tags import BARS, DIFF, LINE, P_VALUE, RETIRED, RETIRED_WHY, SINCE, TESTED

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
    assert tags(registry, "2")[RETIRED_WHY] == fate.line


def test_a_new_shadow_retires_the_standing_one_explicitly_before_taking_its_seat(registry, caplog):
    """The pipeline's shadow verdict has no fate for the standing shadow: it still is retired,
    tagged and logged, never silently displaced with its record restarted."""
    settle(registry, Decision("shadow", WINDOW), "2", "2022-03-31")
    with caplog.at_level(logging.WARNING, logger="podracer.register"):
        settle(registry, Decision("shadow", WINDOW), "3", "2022-06-30")
    assert aliases(registry) == {SHADOW: "3"}
    old = tags(registry, "2")
    assert old[RETIRED] == "2022-06-30" and old[SINCE] == "2022-03-31"
    assert old[RETIRED_WHY].startswith("shadow version 2 retired: its seat goes to version 3 (enters shadow: vs ")
    assert [r.getMessage() for r in caplog.records] == [old[RETIRED_WHY]]
    settle(registry, Decision("shadow", WINDOW), "3", "2022-06-30")  # the holder itself: nothing to retire
    assert RETIRED not in tags(registry, "3") and aliases(registry) == {SHADOW: "3"}


def test_a_look_is_written_on_its_own_and_settling_after_it_changes_nothing(registry):
    """The cycle writes the look as soon as the gate takes it; settle writes it again, alike."""
    settle(registry, Decision("shadow", WINDOW), "2", "2022-03-31")
    fate = ShadowFate("2", "keep", RECORD, 42)
    record_look(registry, fate)
    looked = tags(registry, "2")
    assert looked == {SINCE: "2022-03-31", TESTED: "42", BARS: "42", DIFF: "0.9000", P_VALUE: "0.0300",
                      LINE: fate.line}
    settle(registry, Decision("refuse", WINDOW, fate), "3", "2022-05-31")
    assert tags(registry, "2") == looked and aliases(registry) == {SHADOW: "2"}
    record_look(registry, ShadowFate("2", "keep", (), 42))  # no bar of its record yet: the count only
    assert tags(registry, "2") == looked


def test_a_shadow_without_its_since_tag_is_an_error_not_a_free_seat(registry, tmp_path):
    params = tiny_params(tmp_path).model_copy(update={"registry": registry})
    assert current_shadow(params) is None  # no shadow: nothing to test
    client(registry).set_registered_model_alias(registry.model_name, SHADOW, "2")
    with pytest.raises(MissingInput, match=r"^podracer-ppo version 2 carries the shadow alias but no shadow_since "
                                           r"tag: its record cannot be found"):
        current_shadow(params)


def test_a_shadow_record_is_replayed_beside_the_champion_and_buy_and_hold(built_copy):
    models = built_copy.dirs.models  # the same bundle stands in for both
    champion = Champion("1", models, "2021-08-31", None)
    record = shadow_record(built_copy, Shadow("2", models, "2021-11-30", 0), champion)
    assert list(record.curve.columns) == ["shadow", "champion", "buy_and_hold"]
    assert (record.start, record.end) == ("2021-12-01", "2021-12-31")


def test_a_shadow_that_cannot_be_replayed_is_an_error_and_one_with_no_bar_yet_has_nothing_to_test(built, tmp_path):
    fs_last = "2021-12-31"  # the tiny market's last bar
    nothing = Shadow("2", tmp_path / "gone", "2021-10-01", 0)
    with pytest.raises(MissingInput, match=r"^podracer-ppo shadow version 2 has no record after 2021-10-01: .*gone"):
        shadow_record(built, nothing, None)
    assert shadow_record(built, Shadow("2", built.dirs.models, fs_last, 0), None) is None


def test_a_kept_shadow_gets_its_latest_record_and_keeps_its_alias(registry):
    settle(registry, Decision("shadow", WINDOW), "2", "2022-03-31")
    settle(registry, Decision("refuse", WINDOW, ShadowFate("2", "keep", RECORD, 0)), "3", "2022-04-08")
    assert aliases(registry) == {SHADOW: "2"}
    assert tags(registry, "2")[TESTED] == "0" and tags(registry, "2")[BARS] == "42"


def test_the_pipeline_promotes_its_new_model_directly(registry):
    settle(registry, Decision("promote", WINDOW), "1", "2021-12-31")
    assert aliases(registry) == {CHAMPION: "1"}
