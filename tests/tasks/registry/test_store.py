"""The tracking check a cycle runs before it registers: one line when the server is down."""

import os

import pytest

from standins.postgres import free_port
from tasks.registry.store import SERVER_ENV, TrackingDown, check_tracking


def test_a_down_tracking_server_stops_the_cycle_in_one_line_before_registering(tiny, monkeypatch):
    url = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv(SERVER_ENV, url)
    with pytest.raises(TrackingDown) as err:
        check_tracking(tiny.registry)
    assert str(err.value) == (f"MLflow tracking server {url} does not answer: nothing registered; "
                              "the next cycle will retry")
    monkeypatch.delenv(SERVER_ENV)
    check_tracking(tiny.registry)  # a sqlite store needs no server
    assert os.environ.get(SERVER_ENV) is None
