"""The device script's ``dask`` section (benchmarks/perf/gpu.py): GPU workers beyond one
process (finrl-podracer §4.3; docs/training.md, GPU workers; deploy/dask/).

A real ``dask scheduler`` and two ``dask worker --resources GPU=1`` processes on 127.0.0.1,
both pinned to this machine's first GPU (``CUDA_VISIBLE_DEVICES=0``), train a short
evolution's agent jobs; the same evolution then runs in this process, and the two
leaderboards are compared. Both run under ``train.deterministic``, which every shipped job
sets in its worker (:func:`trainers.population.dispatch.run_job`), so on one GPU they can agree bit
for bit.

The pipeline submits each job as the Prefect task ``train_agent()`` through prefect-dask
(``tasks/model/scaleout.py::DaskPool``). A GPU machine here has no Prefect, so this section
submits that task's function, :func:`trainers.population.dispatch.run_job`, with the pool's resource
and shipping: the setting broadcast once with its data on the CPU, the job's state on the CPU.
trainers/, torch, numpy and dask's wheels only (``pip install --no-deps .whl/*.whl``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from benchmarks.perf.gpu_common import Args
from benchmarks.perf.gpu_market import sample_market
from benchmarks.perf.gpu_parity import compared, tiny_evolution
from trainers.common.jobs import AgentJob
from trainers.config import RuntimeConfig
from trainers.population.dispatch import Setting, gpu_turn, run_job, set_deterministic
from trainers.population.evolution import JobRunner, run_serially

if TYPE_CHECKING:
    from distributed import Client

ROOT = Path(__file__).resolve().parents[2]
GPU = {"GPU": 1}
"""The resource each job asks for, as ``tasks/model/scaleout.py`` asks it."""
WORKERS = 2


def section_dask(args: Args) -> dict[str, Any]:
    """The evolution on two GPU workers, then in this process: wall seconds, which workers
    trained, the GPU memory each worker used, and how far the leaderboards are apart."""
    try:
        from distributed import Client
    except ImportError as error:
        raise RuntimeError("dask is not installed here: carry its wheels (docs/training.md, GPU workers)") from error
    set_deterministic(True)
    data = sample_market(4 if args.tiny else 30, 200 if args.tiny else 600, seed=0, device=args.device)
    runtime = RuntimeConfig(deterministic=True)
    gpu = args.device == "cuda"
    out: dict[str, Any] = {"workers": WORKERS, "CUDA_VISIBLE_DEVICES": _pinned() if gpu else None}
    with tempfile.TemporaryDirectory() as tmp, cluster(Path(tmp), gpu) as address, \
            Client(address, timeout=60) as client:
        client.wait_for_workers(WORKERS, timeout=120)
        remote_run = tiny_evolution(args, data, runtime)
        started = time.perf_counter()
        trained_on: list[str] = []
        remote = remote_run.run(runner=on_workers(client, remote_run.setting, trained_on))
        out["workers_seconds"] = time.perf_counter() - started
        out["jobs_by_worker"] = {w: trained_on.count(w) for w in sorted(set(trained_on))}
        out["worker_gpu_bytes"] = sorted(client.run(_gpu_bytes).values()) if gpu else []
    started = time.perf_counter()
    local = tiny_evolution(args, data, runtime).run(runner=run_serially)
    out["in_process_seconds"] = time.perf_counter() - started
    out |= compared(remote, local) | {"best_fitness": local.best_fitness}
    out["identical"] = (out["same_evaluations"] and out["same_best_agent"]
                        and out["max_fitness_diff"] == out["max_best_actor_weight_diff"] == 0.0)
    return out


def on_workers(client: Client, setting: Setting, trained_on: list[str]) -> JobRunner:
    """A generation's jobs on the cluster, each asking for one ``GPU``, on the GPU workers in
    turn as the pool places them (:func:`trainers.population.dispatch.gpu_turn`), and returned in order;
    ``trained_on`` collects the worker of each job."""
    client.amm.stop()  # keeps the setting's replicas, as the pool does (tasks/model/scaleout.py::DaskPool)
    shipped = client.scatter(setting.shipped(), broadcast=True, hash=False)

    def run(jobs: list[AgentJob], given: Setting) -> list[AgentJob]:
        assert given is setting, "the runner was made for another run"
        workers = client.scheduler_info()["workers"]
        futures = [client.submit(run_job, job.shipped(), shipped, resources=GPU, pure=False, **gpu_turn(workers, i))
                   for i, job in enumerate(jobs)]
        done = client.gather(futures)
        where = client.who_has(futures)
        trained_on.extend(addr for f in futures for addr in where.get(f.key, ())[:1])
        return list(done)

    return run


@contextmanager
def cluster(folder: Path, gpu: bool) -> Iterator[str]:
    """``dask scheduler`` and :data:`WORKERS` ``dask worker --resources GPU=1`` processes on
    127.0.0.1 (a scheduler file, so no port is guessed), pinned to GPU 0 on a GPU machine;
    stopped by PID at the end. Yields the scheduler's address."""
    file = folder / "scheduler.json"
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    if gpu:
        env["CUDA_VISIBLE_DEVICES"] = _pinned()
    dask = [sys.executable, "-m", "dask"]
    logs = [open(folder / f"{name}.log", "w") for name in ("scheduler", *(f"worker-{i}" for i in range(WORKERS)))]
    processes = [subprocess.Popen([*dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                   "--scheduler-file", str(file)], env=env, cwd=ROOT, stdout=logs[0],
                                  stderr=subprocess.STDOUT)]
    try:
        deadline = time.monotonic() + 60
        while not file.exists():
            if time.monotonic() > deadline or processes[0].poll() is not None:
                raise RuntimeError(f"the dask scheduler did not start: {(folder / 'scheduler.log').read_text()[-500:]}")
            time.sleep(0.2)
        processes += [subprocess.Popen([*dask, "worker", "--scheduler-file", str(file), "--host", "127.0.0.1",
                                        "--nworkers", "1", "--nthreads", "1", "--resources", "GPU=1",
                                        "--no-dashboard"], env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
                      for log in logs[1:]]
        yield json.loads(file.read_text())["address"]
    finally:
        for process in reversed(processes):
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        for log in logs:
            log.close()


def _pinned() -> str:
    """The GPU both workers see: this process's first."""
    return os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]


def _gpu_bytes() -> int:
    """The most GPU memory this worker's PyTorch held: above 0 only if it trained on the GPU."""
    return int(torch.cuda.max_memory_allocated()) if torch.cuda.is_available() else 0
