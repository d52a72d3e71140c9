from datetime import date
from pathlib import Path

import pytest

from tasks.config import Params, load_params
from tasks.config_data import default_range
from tasks.errors import ConfigError
from tests.conftest import REPO


def test_repo_params_yaml_is_valid():
    params = load_params(REPO / "params.yaml")
    assert params.evolution.population == 4 and params.evolution.quantile == 0.25
    assert params.env.cost_pct == 0.002


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("data:\n  bogus: 1\n", "data.bogus: unknown key"),
        ("ppo:\n  lrr: 0.1\n", "ppo.lrr: unknown key"),
        ("nonsense: 1\n", "nonsense: unknown key"),
        ("ppo:\n  lr: -1\n", "ppo: lr must be > 0"),
        ("data:\n  symbols: zero\n", "data.symbols: Input should be a valid integer"),
        ("features:\n  train_end: 2023-01-01\n  val_end: 2022-01-01\n", "train_end must be before val_end"),
        ("evolution:\n  search_space: {momentum: [0.1, 0.2]}\n", "search_space.momentum is not one of"),
        ("data: [1, 2\n", "not valid YAML"),
        ("train:\n  engine: gpu\n", "train.engine: Input should be 'multiplexed', 'serial' or 'dask'"),
        ("tournament:\n  leaderboard_size: 2\n  tournament_size: 3\n",
         "tournament_size must be in [1, leaderboard_size]"),
        ("nitro:\n  min_envs: 64\n  max_envs: 8\n", "nitro needs 1 <= min_envs <= max_envs"),
        ("evolution:\n  mode: async\n", "evolution.mode: Input should be 'generational' or 'tournament'"),
        ("evolution:\n  budget_env_steps: 0\n", "budget_env_steps must be >= 1"),
        ("features:\n  train_end: 2021-12-31\n", "set both train_end and val_end, or neither"),
        ("data:\n  timezone: Mars/Olympus\n", "data: timezone 'Mars/Olympus' is not an IANA time zone"),
        ("data:\n  start: 2024-01-01\n", "data: start 2024-01-01 must be before end 2023-12-31"),
        ("validation:\n  max_abs_log_return: 0\n", "validation.max_abs_log_return: Input should be greater than 0"),
        ("tournament:\n  algorithms: {ppo: 0.5, a2c: 0.5}\n", "tournament.algorithms.a2c is not one of ppo, sac"),
        ("tournament:\n  algorithms: {sac: 1.0}\n",
         "tournament.algorithms other than ppo need evolution.mode: tournament"),
        ("evolution:\n  mode: tournament\ntournament:\n  algorithms: {sac: 1.0}\nsac:\n  policy: shared\n",
         "sac.policy shared must equal ppo.policy mlp"),
        ("registry:\n  ensemble: 9\n", "registry.ensemble 9 is more agents than the generational run keeps (8)"),
        ("evolution:\n  mode: tournament\ntournament:\n  algorithms: {ppo: 0.5, sac: 0.5}\nregistry:\n  ensemble: 9\n",
         "registry.ensemble 9 is more agents than the tournament run keeps (8)"),
        ("sac:\n  search_space: {clip: [0.1, 0.2]}\n", "sac.search_space.clip is not one of"),
        ("ppo:\n  start_ranked_by: 0\n", "ppo: start_ranked_by needs policy: shared, one hidden layer"),
        ("ppo: {policy: shared, net_dims: [8], start_ranked_by: 2}\nfeatures: {indicators: [ewm_40_xs, vol_20]}\n",
         "ppo.start_ranked_by 2 names no input: features.indicators has 2"),
        ("ppo: {policy: shared, net_dims: [8], start_ranked_by: 0}\nevolution: {search_space: {net_width: [1, 6]}}\n",
         "evolution.search_space.net_width must start at 2"),
        ("ppo:\n  anchor: -1\n", "ppo: anchor must be >= 0"),
        ("registry:\n  gate_margin: .nan\n", "registry.gate_margin: Input should be a finite number"),
        ("registry:\n  gate_margin: -.inf\n", "registry.gate_margin: Input should be a finite number"),
        ("backtest:\n  risk_free: nan\n", "backtest.risk_free: Input should be a finite number"),
    ],
)
def test_bad_config_is_one_line_naming_the_key(tmp_path, text, expected):
    with pytest.raises(ConfigError) as err:
        load_params(write(tmp_path, text))
    message = str(err.value)
    assert expected in message
    assert "\n" not in message
    assert message.startswith(str(tmp_path / "params.yaml"))


def test_overrides_apply_and_validate(tmp_path):
    params = load_params(write(tmp_path, "ppo:\n  lr: 0.001\n"), ["ppo.gamma=0.9", "evolution.population=2"])
    assert (params.ppo.lr, params.ppo.gamma, params.evolution.population) == (0.001, 0.9, 2)
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        load_params(tmp_path / "missing.yaml", ["ppo.gamma"])


def test_flat_params_cover_every_section():
    flat = Params().flat()
    assert flat["ppo.lr"] == str(2**-14)
    assert flat["data.source"] == "synthetic"
    assert {key.split(".")[0] for key in flat} >= {"data", "validation", "features", "env", "ppo", "evolution",
                                                   "tournament", "nitro", "train"}


def test_each_source_brings_its_own_range_when_the_dates_are_unset():
    repo = load_params(REPO / "params.yaml")
    assert (repo.data.start, repo.data.end) == (date(2016, 1, 1), date(2023, 12, 31))  # the embedded market's
    assert (repo.features.train_end, repo.features.val_end) == (None, None)  # 75/12.5/12.5% of the range
    arch = load_params(REPO / "params.yaml", ["data.source=arch-demo"])
    assert (arch.data.start, arch.data.end) == (date(1999, 1, 1), date(2018, 12, 31))
    mine = load_params(REPO / "params.yaml", ["data.source=arch-demo", "data.start=2005-01-01"])
    assert (mine.data.start, mine.data.end) == (date(2005, 1, 1), date(2018, 12, 31))  # what is set wins
    file = load_params(REPO / "params.yaml", ["data.source=file", "data.path=bars.csv"])
    assert (file.data.start, file.data.end) == (None, None)  # a file is imported whole
    null = load_params(REPO / "params.yaml", ["data.source=arch-demo", "data.end=null"])
    assert null.data.end == date(2018, 12, 31)  # null means "the source's default", as unset does


def test_yahoo_minute_bars_default_to_the_days_yahoo_keeps():
    assert default_range("yahoo", "1min", today=date(2024, 5, 31)) == (date(2024, 5, 2), date(2024, 5, 30))
    assert default_range("yahoo", "1d") == (date(2016, 1, 1), date(2023, 12, 31))
    assert default_range("file", "1d") is None


@pytest.mark.parametrize("name", ["params.yaml", "params.minute.yaml", "params.paper.yaml"])
def test_a_shipped_order_cap_lets_a_position_the_weight_allows_be_built_from_cash(name):
    """The trading loop never splits an order, so a cap below max_position_weight x the account
    blocks buys the weight allows, a position bought from cash first, and the paper record departs
    from the champion's (docs/delivery.md, risk checks: `make run` once blocked its two largest buys)."""
    params = load_params(REPO / name)
    risk = params.trade.risk
    assert risk.max_order_notional >= risk.max_position_weight * params.env.initial_cash
