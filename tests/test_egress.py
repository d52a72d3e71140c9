"""``tests/egress/sitecustomize.py``, the watch the services and live-watch tests keep on every
process they start (docs/testing.md, Nothing leaves the machine): in a new interpreter, a lookup and a connection
to 192.0.2.1 (TEST-NET-1; numeric, and UDP, so nothing is sent) are recorded with their stacks,
while loopback by name and by address, and a Unix socket, are not."""

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

CODE = """
import socket
socket.getaddrinfo("localhost", 80)
socket.getaddrinfo("::1", 80, flags=socket.AI_NUMERICHOST)
with socket.socket() as server, socket.socket() as client:
    server.bind(("127.0.0.1", 0)); server.listen(1); client.connect(server.getsockname())
left, right = socket.socketpair(); left.close(); right.close()
socket.getaddrinfo("192.0.2.1", 9, flags=socket.AI_NUMERICHOST)  # line 8: its record's stack names it
with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
    try:
        udp.connect(("192.0.2.1", 9))  # a UDP connect only sets where datagrams would go
    except OSError:
        pass  # no route here: the watch has already seen it
print("done")
"""


def test_the_watch_records_what_leaves_loopback_and_each_process_it_watched(tmp_path: Path) -> None:
    log = tmp_path / "egress.log"
    env = {**os.environ, "PYTHONPATH": str(REPO / "tests" / "egress"), "PODRACER_EGRESS_LOG": str(log)}
    done = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "done\n", done.stderr
    records = [line.split() for line in log.read_text().splitlines() if line.startswith("socket.")]
    assert [record[:2] for record in records] == [["socket.getaddrinfo", "'192.0.2.1'"],
                                                  ["socket.connect", "'192.0.2.1'"]]
    assert 'File "<string>", line 8, in <module>' in log.read_text()  # each with the stack that made it
    pid = records[0][3]
    assert [record[3] for record in records] == [pid, pid]
    watched = (tmp_path / "egress.log.watched").read_text().splitlines()
    assert len(watched) == 1 and watched[0].startswith(f"{pid} {sys.executable} -c import socket socket.getaddrinfo(")


QUIETING = ("PYTEST_CURRENT_TEST", "CI", "GITHUB_ACTIONS", "GITLAB_CI", "CIRCLECI", "JENKINS_URL", "TRAVIS",
            "TF_BUILD", "BITBUCKET_BUILD_NUMBER", "BITBUCKET_COMMIT", "CODEBUILD_BUILD_ARN", "CODEBUILD_BUILD_ID",
            "BUILDKITE", "TEAMCITY_VERSION", "CLOUD_RUN_EXECUTION", "DRONE", "SEMAPHORE", "APPVEYOR", "BUDDY",
            "CI_NAME", "RUNBOT_HOST_URL", "RUNBOT_BUILD_NAME", "RUNBOT_WORKER_ID", "DVC_TEST")
"""The variables by which MLflow (``mlflow/telemetry/utils.py``), Prefect
(``prefect/_internal/analytics/ci_detection.py``) and DVC tell a CI run or a test, and then
send no telemetry whatever the settings say."""


def as_a_user(log: Path) -> dict[str, str]:
    """This environment as a user's shell has it, with the egress watch on (writing ``log``): no
    CI or test marker (:data:`QUIETING`) and none of ``.env``'s settings, which every entry point
    must load itself (``tasks/settings.py``), so that what keeps the libraries quiet is the
    project's own configuration."""
    from tasks.settings import env_defaults

    settings = env_defaults()
    env = {k: v for k, v in os.environ.items() if k not in settings and k not in QUIETING}
    path = os.pathsep.join(filter(None, (str(REPO / "tests" / "egress"), os.environ.get("PYTHONPATH"))))
    return {**env, "PYTHONPATH": path, "PODRACER_EGRESS_LOG": str(log)}


def test_as_a_user_neither_mlflow_nor_prefect_takes_the_run_for_ci_and_no_setting_is_preset(tmp_path: Path) -> None:
    probe = "print(_is_ci_env_or_testing(), is_ci_environment(), os.environ.get('MLFLOW_DISABLE_TELEMETRY'))"
    code = ("import os; from mlflow.telemetry.utils import _is_ci_env_or_testing; "
            f"from prefect._internal.analytics.ci_detection import is_ci_environment; {probe}; "
            f"os.environ['CI'] = 'true'; {probe}")  # the second: the probe does tell a CI run
    done = subprocess.run([sys.executable, "-c", code], env=as_a_user(tmp_path / "egress.log"), capture_output=True,
                          text=True, timeout=120)
    assert done.stdout.split() == ["False", "False", "None", "True", "True", "None"], done.stderr[-2000:]
    assert (tmp_path / "egress.log.watched").read_text().count(" -c import os;") == 1
