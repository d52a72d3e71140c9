"""The delivery and operations sections of the one config (tasks/config.py): the local paper
broker, the trading loop and its risk checks (stage 7, docs/delivery.md), and what ``podracer
up`` runs: its services, the continuous-training cycle, the champion's watch and the schedules
(docs/operations.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, model_validator

from tasks.config_data import Section


class BrokerParams(Section):
    """The local paper broker (``podracer broker``): Alpaca's Trading API on 127.0.0.1 (docs/delivery.md)."""

    host: str = Field("127.0.0.1", description="address the service binds; keep it on loopback")
    port: int = Field(8710, ge=0, le=65535, description="port of `podracer broker` (0: any free port)")
    clock: Literal["wall", "simulated"] = Field(
        "wall", description="wall: sessions follow the time of day and fill once their bar is in the feed; "
        "simulated: POST /podracer/v1/clock/advance steps bar by bar")
    key_file: Path | None = Field(None, description="0600 JSON file of the account's keys "
                                  "(default data_dir/broker/keys.json, created on first start)")
    feed_sessions: int = Field(20, ge=1, description="minute bars: the broker reads the last this many sessions "
                               "of data/validated (and back to where its clock or a replay stands); daily bars: all")

    @model_validator(mode="after")
    def _loopback(self) -> BrokerParams:
        if self.host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("host must be a loopback address (127.0.0.1): the paper broker is not for a network")
        return self


class RiskParams(Section):
    """Pre-trade checks of the trading loop; an order that fails one is not sent (docs/delivery.md)."""

    max_order_notional: float = Field(500_000.0, gt=0, description="largest order, at the last close; never "
                                      "split, so below max_position_weight x equity it blocks allowed buys")
    max_position_weight: float = Field(0.5, gt=0, le=1, description="largest position after a buy, "
                                       "as a share of equity")
    daily_loss_limit: float = Field(0.1, gt=0, le=1, description="halt trading when equity falls this share "
                                    "below the previous close")


class TradeParams(Section):
    """Stage 7 and ``podracer trade``: which broker the trading loop drives through alpaca-py."""

    broker: Literal["local", "alpaca"] = Field("local", description="local: the paper broker service; "
                                               "alpaca: Alpaca paper trading (keys from APCA_API_KEY_ID / "
                                               "APCA_API_SECRET_KEY)")
    url: str | None = Field(None, description="the broker's base URL (default: a local broker on broker.port "
                            "if one answers, else one started for the cycle; alpaca: its paper endpoint)")
    experiment: str = Field("podracer-trading", description="MLflow experiment of the trading sessions")
    fill_timeout_seconds: float = Field(10.0, ge=0, description="how long a cycle polls for its fills")
    poll_seconds: float = Field(0.2, gt=0, description="polling interval of fills and of the market clock")
    risk: RiskParams = RiskParams()

    @model_validator(mode="after")
    def _url(self) -> TradeParams:
        if self.url is not None and (not self.url.startswith(("http://", "https://")) or self.url.endswith("/")):
            raise ValueError("url must start with http:// or https:// and not end with / (alpaca-py adds /v2/...)")
        return self


class ServicesParams(Section):
    """``podracer up``: the local Prefect and MLflow servers beside the broker, on 127.0.0.1 (docs/operations.md)."""

    prefect_port: int = Field(4200, ge=1, le=65535, description="Prefect server and UI")
    mlflow_port: int = Field(5000, ge=1, le=65535, description="MLflow tracking server and UI")
    start_timeout: float = Field(120.0, gt=0, description="seconds each service may take to answer its health check")
    receiver_port: int = Field(8720, ge=1, le=65535, description="MLflow webhook receiver (emits Prefect events)")
    poll_seconds: float = Field(60.0, gt=0, description="registry poll for lost webhooks: a champion not "
                                "delivered for this long is delivered again")
    runner_port: int = Field(8730, ge=1, le=65535, description="the runner's health endpoint (Prefect's runner "
                             "webserver: 200 while its poll of the server is current)")
    health_grace: float = Field(60.0, gt=0, description="seconds a running service may fail its health check "
                                "before the supervisor restarts it")
    restart_backoff: float = Field(1.0, gt=0, description="seconds before the first restart of a service; each "
                                   "further restart within restart_window waits twice as long (at most 60 s)")
    restart_limit: int = Field(5, ge=1, description="restarts of one service within restart_window after which "
                               "the supervisor stops retrying it (a crash loop)")
    restart_window: float = Field(600.0, gt=0, description="seconds over which restarts are counted")


class CTParams(Section):
    """The continuous-training cycle (``flows/ct_cycle.py``, docs/operations.md)."""

    generations: int = Field(2, ge=1, description="generations of the warm-started population per cycle")
    eval_bars: int = Field(63, ge=5, description="the latest bars: the window challenger, champion and "
                           "buy-and-hold are compared on; the challenger never sees them")
    shadow_bars: int = Field(21, ge=1, description="bars a shadow's record must grow between two tests of "
                             "it: at most bars-a-year / shadow_bars tests a year (252 daily, 252 x 390 on 1min bars; "
                             "docs/operations.md, the gate)")
    shadow_max_bars: int = Field(126, ge=1, description="a shadow's maximum age: at the first test of its "
                                 "record at this many bars or more it is retired unless promoted, so a shadow that "
                                 "never shows an edge frees its seat (126: half a year of daily bars; "
                                 "docs/operations.md, the gate)")

    @model_validator(mode="after")
    def _check(self) -> CTParams:
        if self.shadow_max_bars < self.shadow_bars:
            raise ValueError(f"shadow_max_bars {self.shadow_max_bars} is below shadow_bars {self.shadow_bars}: "
                             "a shadow would be retired before its first test")
        return self


class WatchParams(Section):
    """The champion's live watch (``tasks/registry/decay.py``, docs/operations.md, the watch)."""

    tolerance: float = Field(0.25, ge=0.0, description="annualised information ratio the live record may fall "
                             "short of the promise's lower bound before it counts as decay")
    years: float = Field(2.0, gt=0.0, description="mean years between false alarms of a record that sits exactly "
                         "at a reference (the CUSUM's average run length); 2 keeps false rollbacks of a champion "
                         "whose edge holds under 0.1 a year (docs/results.md, the watch)")
    alpha: float = Field(0.05, gt=0.0, lt=1.0, description="one-sided level of the promise's lower bound: the "
                         "gate's estimate of the edge less its uncertainty")


class ScheduleParams(Section):
    """When the deployments run by themselves (cron, in ``timezone``)."""

    timezone: str = Field("America/New_York", description="IANA time zone of the cron schedules")
    retrain_cron: str = Field("30 17 * * 1-5", description="ct-cycle/nightly: after the NYSE close, Mon-Fri")
    trade_cron: str = Field("35 9 * * 1-5", description="trade/session: after the NYSE open, Mon-Fri")

    @model_validator(mode="after")
    def _check(self) -> ScheduleParams:
        try:
            ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"timezone {self.timezone!r} is not an IANA time zone") from None
        for name in ("retrain_cron", "trade_cron"):
            if len(getattr(self, name).split()) != 5:
                raise ValueError(f"{name} needs 5 cron fields (minute hour day month weekday)")
        return self
