"""Every ``podracer`` command run once at tiny size, as a user runs it: exit code and what it prints.

The commands run as processes in a fresh project folder with a tiny ``params.yaml``, in the
order a user would: the stages one by one, then ``promote`` and the whole pipeline with
``run`` (on the tests' Prefect server rather than a temporary one of its own). The same
project then runs every other example command of the README and docs/usage.md, in their
order (tests/test_readme.py reads them from the pages): one project serves both, since the
first pass is the README's own stage-by-stage example.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import requests
import typer

from flows.cli import app
from standins.postgres import free_port
from tests.commands import podracer
from tests.conftest import REPO
from tests.test_readme import ELSEWHERE, RUNNABLE, prepare, tiny_project


def say(root, *args: str, code: int = 0) -> str:
    """Run one command in ``root``; return what it printed, line wraps undone."""
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), "COLUMNS": "200",
           "PYTHONPATH": str(REPO)}
    done = podracer(root, args, env)
    output = done.stdout + done.stderr
    assert done.returncode == code, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert "Still processing items" not in output, output[-3000:]  # Prefect's events were sent before the exit
    return " ".join(done.stdout.split())


def serves(root) -> float:
    """Start `podracer broker` on a free port, wait until it answers with the project's keys, stop it
    with SIGTERM; return how long it took to answer."""
    port = free_port()
    started = time.monotonic()
    process = subprocess.Popen([sys.executable, "-m", "flows.cli", "broker", "--port", str(port)], cwd=root,
                               env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    try:
        keys = json.loads((root / "data" / "broker" / "keys.json").read_text())
        headers = {"APCA-API-KEY-ID": keys["key_id"], "APCA-API-SECRET-KEY": keys["secret_key"]}
        while True:
            assert process.poll() is None, process.stdout.read()
            try:
                if requests.get(f"http://127.0.0.1:{port}/v2/clock", headers=headers, timeout=10).ok:
                    return time.monotonic() - started
            except requests.ConnectionError:
                time.sleep(0.1)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) is not None


@pytest.mark.slow
def test_every_command_runs_and_says_what_it_did(tmp_path, prefect_server):
    tiny_project(tmp_path, dates=True)
    lines: list[list[str]] = []

    def command(*args: str, code: int = 0) -> str:
        lines.append(list(args))
        return say(tmp_path, *args, code=code)

    assert re.search(r"✓ ingest \d+ rows, 4 symbols, data version [0-9a-f]{16}$", command("ingest"))
    assert re.search(r"✓ validate (\d+) of \1 rows passed, 0 quarantined; report data/quarantine/report\.md$",
                     command("validate"))
    assert command("features").endswith(
        "✓ features 384 bars x 4 symbols x 10 indicators; train 2020-06-25..2021-03-31, "
        "validation 2021-04-01..2021-08-31, test 2021-09-01..2021-12-31")  # 505 sessions less 121 of warm-up
    assert re.search(r"✓ train best validation sharpe -?\d+\.\d{3} \(agent \d, generation \d\), [\d,]+ env steps in "
                     r"\d+s \(generational on multiplexed, cpu\); the best of \d+ evaluations would lead by "
                     r"\d+\.\d\d by luck alone$", command("train"))
    tested = command("backtest")
    assert "Backtest 2021-09-01 to 2021-12-31" in tested and "buy-and-hold" in tested
    assert tested.endswith("✓ backtest plot data/backtest/equity.png")
    assert re.search(r"✓ register podracer-ppo version 1 alias champion \(promoted: vs buy-and-hold: ΔSharpe "
                     r"[-+]\d+\.\d\d \[90% CI [-+]\d+\.\d\d, [-+]\d+\.\d\d\], p 0\.000 < α 0\.05 over 85 bars\); "
                     r"run [0-9a-f]{32}$", command("register"))
    replayed = command("trade", "--replay", "test")
    assert re.search(r"✓ replay 2021-09-01\.\.2021-12-31: 85 bars, final paper equity [\d,.]+; equal to the "
                     r"backtest to the cent \(largest difference ", replayed)
    assert "Paper orders for bar 2021-12-31 from models:/podracer-ppo/1" in command("deliver")
    assert re.search(r"✓ trade halted \(data/broker/HALT\); \d+ open order\(s\) canceled$", command("trade", "--halt"))
    assert command("trade", "--unhalt").endswith("✓ trade trading resumed")
    assert "Paper orders for bar 2021-12-31 from models:/podracer-ppo/1" in command("trade", "--once")
    assert serves(tmp_path) < 30.0
    assert command("promote", "1").endswith("✓ promote podracer-ppo version 1 is champion")
    assert command("promote", "7", code=1).endswith("✗ promote: podracer-ppo: no version 7 in "
                                                    "sqlite:///mlflow/mlflow.db")
    summary = command("run")  # the same data and config train the same model: no test against the champion
    assert "model podracer-ppo version 2 (alias challenger) gate refused: vs champion: no test, " in summary
    assert "┃ metric ┃ agent ┃ champion ┃ buy-and-hold ┃" in summary  # the gate faced the champion
    assert re.search(r"MLflow run [0-9a-f]{32} data version [0-9a-f]{16} \(reused\)", summary)
    assert "artifacts plot data/backtest/equity.png, metrics data/backtest/metrics.json" in summary
    assert "Paper orders for bar 2021-12-31 from models:/podracer-ppo/1" in summary
    assert command("promote", "2").endswith("✓ promote podracer-ppo version 2 is champion; "
                                            "version 1 is previous_champion")
    assert command("promote", "1").endswith("✓ promote podracer-ppo version 1 is champion; "
                                            "version 2 is previous_champion")
    assert command("rollback").endswith("✓ rollback podracer-ppo version 2 is champion again; "
                                        "version 1 is previous_champion")
    assert re.search(r"✓ simulate 3 session\(s\) 2022-01-03\.\.2022-01-05, 12 bars appended to data/raw; data "
                     r"version [0-9a-f]{16} \(was [0-9a-f]{16}\); ", command("simulate", "--bars", "3"))
    cycled = command("ct", "-s", "ct.eval_bars=20", "-s", "ct.generations=1")
    assert re.search(r"✓ ct version 3: enters shadow \(promoted on the record it trades, not on the window that "
                     r"chose it\): vs champion: ΔSharpe [-+]\d+\.\d\d .*; largest p 0\.000 < α 0\.05 over 20 bars; "
                     r"3 new "
                     r"bar\(s\), run [0-9a-f]{32} challenger: warm start from the champion; best validation", cycled)
    assert re.search(r"✓ ct nothing new since data version [0-9a-f]{8} \(last bar 2022-01-05\): the cycle ends here$",
                     command("ct"))
    elsewhere = {"up", "down", "status", "receiver"}  # tests/flows/test_services.py: real servers
    ran = {args[0] for args in lines} | {"broker"}  # `broker`: serves() above
    assert ran | elsewhere == set(typer.main.get_command(app).commands)  # a new command needs a line here

    # the pages' other examples, in their order (`promote 3` finds the version `ct` registered)
    for args in [a for a in RUNNABLE if a not in ELSEWHERE and a not in lines]:
        prepare(args, tmp_path)
        command(*args)
