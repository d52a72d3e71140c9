"""``podracer`` commands run as processes, forked from one that has imported the heavy libraries once.

Each command still runs in a process of its own, as ``python -m flows.cli ARGS`` in a shell
would: a fresh ``flows.cli`` run as ``__main__`` in the command's working directory, with its
own environment, stdout, stderr and exit code, and the interpreter's normal exit (threads
joined, exit handlers run). What the fork saves is the seconds a new interpreter spends importing
torch, MLflow (with its SQL stores, and IPython, which ``mlflow.start_run`` imports to ask whether
it runs in a Databricks notebook), pandas, scikit-learn, Great Expectations and alpaca-py
(:data:`PRELOADED`): the CLI test ran in 157 s alone with it and 201 s without (docs/testing.md,
Where the time goes).

Prefect and the project's own modules are never preloaded: Prefect reads its settings when it is
imported, and every command must load ``.env`` and find ``podracer up``'s servers before it does
(``tasks/settings.py``). The preload is the same in every process, so it cannot depend on a
command's environment. ``tests/flows/test_cli.py`` imports the CLI in a new interpreter of its
own to prove that importing it reads no settings.

Why the preload is frozen: the forking process moves every object it holds into the garbage
collector's permanent generation (``gc.freeze``) before each fork, as Python's ``gc`` docs advise
for a process that forks without exec. Otherwise the child's collections, the one at its exit
above all, visit every preloaded object (writing to each, so its page is copied too): a command
that ran for 0.3 s took 3.3 CPU-seconds in all, 0.7 with the freeze (docs/testing.md, Where the
time goes). The preloaded objects live as long as the child either way, so what the collector no
longer visits it would never have freed.
"""

from __future__ import annotations

import atexit
import gc
import importlib.util
import json
import os
import runpy
import select
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PRELOADED = ("torch", "mlflow", "mlflow.pyfunc", "mlflow.store.tracking.sqlalchemy_store",
             "mlflow.store.model_registry.sqlalchemy_store", "IPython", "pandas", "pyarrow.parquet", "scipy.stats",
             "sklearn", "great_expectations", "alpaca.trading.client", "fastapi", "uvicorn", "matplotlib",
             "exchange_calendars")
"""Third-party libraries that read no setting a command changes when they are imported, and
change no global a command reads (quantstats, for one, restyles matplotlib: not here)."""
NEVER = ("prefect", "flows", "tasks", "trainers", "benchmarks", "standins")
"""Top-level packages the preload must not import (see the module docstring)."""


@dataclass(frozen=True)
class Done:
    """What a command left: its exit code and what it printed."""

    returncode: int
    stdout: str
    stderr: str
    cpu_seconds: float
    """The CPU time the command's process took, user and system (``tests/test_commands.py``)."""


def serve() -> None:
    """The forking process: preload, then fork one child per request line on stdin, answering
    with the child's pid, then its exit code and CPU-seconds, on stdout; ends when stdin closes."""
    before = dict(os.environ)
    for name in PRELOADED:
        __import__(name)
    # what the imports put in the environment (MLflow's session id, OpenMP's fork settings), as
    # they would in the command's own process, unless the command's environment already says
    exported = {key: value for key, value in os.environ.items() if before.get(key) != value}
    pulled = sorted({m.split(".")[0] for m in sys.modules} & set(NEVER))
    if pulled:
        raise SystemExit(f"tests/commands.py: the preload imported {pulled}")
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        gc.freeze()  # see the module docstring, Why the preload is frozen
        pid = os.fork()
        if pid == 0:
            # raises SystemExit out of this loop: the child's interpreter exits as any does
            _become({**request, "env": {**exported, **request["env"]}})
        print(pid, flush=True)
        _, status, usage = os.wait4(pid, 0)
        print(os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime, flush=True)


def _become(request: dict) -> None:
    """In the child: the command's directory, environment, streams and ``sys.argv``, then
    ``flows.cli`` as ``__main__`` (``python -m`` puts the working directory first on ``sys.path``)."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    log = os.environ.get("PODRACER_EGRESS_LOG")
    if log:  # the egress watch (tests/test_egress.py), which a new interpreter would start by itself
        _egress_watch()(Path(log), " ".join(["podracer", *request["args"]]))
    sys.stdin = open(os.devnull)
    os.dup2(sys.stdin.fileno(), 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        target = os.open(path, os.O_WRONLY | os.O_TRUNC)
        os.dup2(target, fd)
        os.close(target)
    sys.path[0] = os.getcwd()
    sys.argv = ["-m", *request["args"]]
    runpy.run_module("flows.cli", run_name="__main__", alter_sys=True)
    raise SystemExit(0)


def _egress_watch() -> Any:
    """``watch`` of ``tests/egress/sitecustomize.py``, loaded by its path (that folder is a
    ``PYTHONPATH`` entry of its own, not a package)."""
    spec = importlib.util.spec_from_file_location("egress_watch", REPO / "tests" / "egress" / "sitecustomize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.watch


class Forker:
    """One forking process per test process, started on first use and stopped at its exit."""

    _lock = threading.Lock()
    _process: subprocess.Popen | None = None
    _pending = b""

    @classmethod
    def run(cls, args: list[str], cwd: Path, env: dict[str, str], timeout: float) -> Done:
        with cls._lock, tempfile.TemporaryDirectory(prefix="podracer-command-") as folder:
            process = cls._started()
            out, err = Path(folder) / "stdout", Path(folder) / "stderr"
            out.touch()
            err.touch()
            request = {"args": args, "cwd": str(cwd), "env": env, "stdout": str(out), "stderr": str(err)}
            process.stdin.write(json.dumps(request).encode() + b"\n")
            process.stdin.flush()
            pid = int(cls._line(60))
            try:
                code, cpu = cls._line(timeout).split()
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
                cls._line(60)
                raise subprocess.TimeoutExpired(args, timeout, out.read_text(), err.read_text()) from None
            return Done(int(code), out.read_text(), err.read_text(), float(cpu))

    @classmethod
    def _line(cls, timeout: float) -> bytes:
        """The forking process's next answer line, read from its pipe unbuffered."""
        fd = cls._process.stdout.fileno()
        while b"\n" not in cls._pending:
            if not select.select([fd], [], [], timeout)[0]:
                raise TimeoutError
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError(f"tests/commands.py: the forking process ended (exit code {cls._process.wait()})")
            cls._pending += chunk
        line, cls._pending = cls._pending.split(b"\n", 1)
        return line

    @classmethod
    def _started(cls) -> subprocess.Popen:
        if cls._process is None or cls._process.poll() is not None:
            env = {**os.environ, "PYTHONPATH": str(REPO)}
            cls._process = subprocess.Popen([sys.executable, "-c", "from tests.commands import serve; serve()"],
                                            cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            bufsize=0)
            cls._pending = b""
            atexit.register(cls._process.kill)
        return cls._process


def podracer(root: Path, args: list[str], env: dict[str, str], timeout: float = 600) -> Done:
    """``python -m flows.cli ARGS`` in ``root`` with exactly ``env``, the repository first on its
    ``PYTHONPATH`` (then what ``env`` puts there: the egress watch's folder, tests/test_egress.py)."""
    path = [str(REPO), *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(REPO))]
    return Forker.run([str(a) for a in args], Path(root), {**env, "PYTHONPATH": os.pathsep.join(path)}, timeout)
