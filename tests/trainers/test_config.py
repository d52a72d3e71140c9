"""The trainers' configs against the bars they trade: the minute decision grid and ``overnight``."""

import pytest

from tasks.config import load_params
from tasks.errors import ConfigError
from trainers.config import EnvConfig


@pytest.mark.parametrize("k", [1, 2, 3, 5, 6, 10, 15, 30])
def test_minute_decisions_divide_30(k):
    EnvConfig(decide_every=k).check_freq("1min")


@pytest.mark.parametrize("k", [4, 7, 13, 60])
def test_a_minute_grid_that_misses_session_closes_is_refused(k):
    with pytest.raises(ValueError, match=f"env.decide_every {k} must divide 30 on 1min bars"):
        EnvConfig(decide_every=k).check_freq("1min")
    EnvConfig(decide_every=k).check_freq("1d")  # a daily bar is a whole session: any k


def test_flatten_needs_intraday_bars():
    EnvConfig(overnight="flatten").check_freq("1min")
    with pytest.raises(ValueError, match="env.overnight: flatten needs intraday bars, not 1d"):
        EnvConfig(overnight="flatten").check_freq("1d")


def test_params_report_it_in_one_line(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_params(tmp_path / "none.yaml", ["data.freq=1min", "env.decide_every=7"])
    assert "\n" not in str(err.value) and "env.decide_every 7 must divide 30" in str(err.value)
