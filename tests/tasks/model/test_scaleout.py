"""Scale-out on Dask (tasks/model/scaleout.py): real LocalClusters on 127.0.0.1, tiny agents, and
results compared bit for bit with the same jobs run in this process."""

from __future__ import annotations

import copy
import math
import os
import signal
import subprocess
import sys
import time
import typing
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import asdict
from pathlib import Path
from typing import Any

import dask
import pytest
import torch
from distributed import LocalCluster, get_task_stream
from prefect_dask.client import PrefectDaskClient

from standins.postgres import free_port
from tasks.config import TrainParams, load_params
from tasks.errors import ConfigError
from tasks.model.scaleout import ENGINES, NO_FIXED_PORT, DaskPool, run_on
from tests.trainers.helpers import market, scales
from trainers.common.jobs import AgentJob
from trainers.config import EnvConfig, PPOConfig
from trainers.population.config import EvolutionConfig
from trainers.population.dispatch import JobPool, Setting, run_job
from trainers.population.evolution import Evolution, JobRunner, run_serially
from trainers.ppo.multiplex import KeptPPO

DATA = market(t=60)
ENV = EnvConfig(initial_cash=10_000.0, hmax=100, episode_len=8, min_episode_len=4)
PPO = PPOConfig(num_envs=4, horizon=8, batch_size=16, repeat_times=1, net_dims=(8,), lr=0.01)
SETTING = Setting(DATA, scales(DATA, ENV), ENV, PPO, (0, 39), (39, 59), 252.0, "sharpe", iterations=2,
                  eval_interval=1, patience=0)


def fresh_job(index: int, hparams: dict[str, float]) -> AgentJob:
    """A job of generation 0, as the evolution builds it for a new agent."""
    agent = SETTING.agent(hparams, seed=index)
    best = (-math.inf, 0, copy.deepcopy(agent.actor.state_dict()))
    return AgentJob(0, index, hparams, index, agent.state_dict(), best, math.nan, 0, None)


def jobs(count: int) -> list[AgentJob]:
    return [fresh_job(i, {"lr": 0.002 * (i + 1), "num_envs": 2 + 2 * i}) for i in range(count)]


def in_process(job: AgentJob) -> AgentJob:
    """``run_job`` in this process."""
    return run_job(job, SETTING)


def job_runner(train: TrainParams, setting: Setting) -> AbstractContextManager[JobRunner]:
    """The job runner ``train.engine`` names, as the train stage opens it."""
    return ENGINES[train.engine].runner(train, setting)


def job_pool(train: TrainParams, setting: Setting) -> AbstractContextManager[JobPool | None]:
    """The pool ``train.engine`` names, as the train stage opens it."""
    return ENGINES[train.engine].pool(train, setting)


MEASURED = {"cpu_seconds", "gpu_seconds"}
"""Fields of the cost ledger that time the work rather than result from it."""


def assert_same(x: Any, y: Any, path: str = "job") -> None:
    """Bit-identical: tensors ``torch.equal``, containers element by element, NaN equal to NaN;
    the env steps spent included, the measured seconds left out."""
    if isinstance(x, torch.Tensor):
        assert isinstance(y, torch.Tensor) and x.dtype == y.dtype and torch.equal(x, y), path
    elif isinstance(x, dict):
        assert isinstance(y, dict) and x.keys() == y.keys(), path
        for key in x.keys() - MEASURED:
            assert_same(x[key], y[key], f"{path}.{key}")
    elif isinstance(x, (list, tuple)):
        assert type(x) is type(y) and len(x) == len(y), path
        for i, (a, b) in enumerate(zip(x, y)):
            assert_same(a, b, f"{path}[{i}]")
    elif isinstance(x, float) and math.isnan(x):
        assert isinstance(y, float) and math.isnan(y), path
    else:
        assert x == y, path


def evolution(population: int, quantile: float) -> Evolution:
    """Two generations of tiny agents whose learning rates and env counts are evolved."""
    evo = EvolutionConfig(population=population, generations=2, iterations_per_generation=2, eval_interval=1,
                          quantile=quantile, search_space={"lr": (1e-3, 1e-2), "num_envs": (2, 6)})
    return Evolution(DATA, SETTING.scales, ENV, PPO, evo, (0, 39), (39, 59), 252.0)


def wait_until(condition: Callable[[], bool], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def cluster(prefect_server: None) -> Iterator[LocalCluster]:
    """Two single-thread workers in this process, over TCP on 127.0.0.1 (so jobs are
    pickled as for remote workers), each with one GPU resource; Dask's Active Memory Manager
    looks every 50 ms instead of every 2 s, so that a replica it would drop is gone at once."""
    often = {"distributed.scheduler.active-memory-manager.interval": "50ms"}
    with dask.config.set(often), LocalCluster(n_workers=2, threads_per_worker=1, processes=False, protocol="tcp://",
                                              host="127.0.0.1", dashboard_address=None,
                                              scheduler_kwargs=NO_FIXED_PORT, resources={"GPU": 1}) as local:
        yield local


@pytest.mark.slow
def test_a_generation_on_a_local_cluster_equals_the_serial_run(prefect_server: None) -> None:
    inputs = jobs(3)
    expected = run_serially(copy.deepcopy(inputs), SETTING)
    with job_runner(TrainParams(engine="dask", dask="local", dask_workers=1), SETTING) as runner:
        remote = runner(inputs, SETTING)
    assert [job.index for job in remote] == [0, 1, 2]
    for got, want in zip(remote, expected):
        assert_same(asdict(got), asdict(want))
        assert got.records


@pytest.mark.slow
def test_an_evolution_on_dask_ends_as_the_in_process_one(cluster: LocalCluster) -> None:
    local = evolution(3, 0.34).run(runner=run_serially)
    remote_run = evolution(3, 0.34)
    with job_runner(TrainParams(engine="dask", dask=cluster.scheduler_address), remote_run.setting) as runner:
        remote = remote_run.run(runner=runner)
    assert_same(asdict(remote), asdict(local), "result")
    assert any(r.parent is not None for r in remote.history)  # the selector copied agents between generations


@pytest.mark.slow
def test_the_pool_hands_each_job_back_once_as_run_in_process(cluster: LocalCluster) -> None:
    inputs = jobs(3)
    with job_pool(TrainParams(engine="dask", dask=cluster.scheduler_address), SETTING) as pool:
        assert isinstance(pool, DaskPool)
        for job in inputs:
            pool.submit(job)
        assert [id(job) for job in pool.pending()] == [id(job) for job in inputs]  # the inputs themselves
        returned = []
        while pool.pending():
            left = len(pool.pending())
            returned.append(pool.next_finished())
            assert len(pool.pending()) == left - 1
            assert all(job.index not in {r.index for r in returned} for job in pool.pending())
        with pytest.raises(RuntimeError, match="no job"):
            pool.next_finished()
    assert sorted(job.index for job in returned) == [0, 1, 2]
    for job in returned:
        assert_same(asdict(job), asdict(in_process(inputs[job.index])))


@pytest.mark.slow
def test_the_setting_stays_on_every_worker_while_no_job_needs_it(cluster: LocalCluster) -> None:
    """Between two generations no job waits on the setting: Dask's Active Memory Manager would
    drop all but one of its replicas, and the next generation's jobs would queue on that worker."""
    tasks = cluster.scheduler.tasks
    wait_until(lambda: not tasks)
    with PrefectDaskClient(cluster.scheduler_address, set_as_default=False) as client:
        _pool = DaskPool(client, SETTING, gpu=False)  # held: its future keeps the setting
        (setting,) = tasks.values()
        time.sleep(0.5)  # ten of the manager's looks
        assert setting.who_has == set(cluster.scheduler.workers.values())


@pytest.mark.slow
def test_gpu_jobs_ask_for_the_gpu_resource_and_run(cluster: LocalCluster) -> None:
    inputs = jobs(2)
    tasks = cluster.scheduler.tasks
    wait_until(lambda: not tasks)  # earlier tests' tasks are forgotten
    with PrefectDaskClient(cluster.scheduler_address, set_as_default=False) as client:
        pool = DaskPool(client, SETTING, gpu=True)
        for job in inputs:
            pool.submit(job)
        jobs_of = lambda: [ts for key, ts in tasks.items() if str(key).startswith("run_job-")]  # noqa: E731
        wait_until(lambda: len(jobs_of()) == 2)
        assert all(ts.resource_restrictions == {"GPU": 1} for ts in jobs_of())
        # the two GPU workers in turn, loosely: a job whose worker has gone runs elsewhere
        assert sorted(w for ts in jobs_of() for w in ts.worker_restrictions) == sorted(cluster.scheduler.workers)
        assert all(ts.loose_restrictions for ts in jobs_of())
        setting = [ts for ts in tasks.values() if ts not in jobs_of()]  # the shared setting, on every worker
        assert len(setting) == 1 and len(setting[0].who_has) == len(cluster.workers)
        returned = [pool.next_finished() for _ in inputs]
    assert sorted(job.index for job in returned) == [0, 1]
    for job in returned:
        assert_same(asdict(job), asdict(in_process(inputs[job.index])))


@pytest.fixture(scope="module")
def gpu_workers(prefect_server: None) -> Iterator[str]:
    """``dask scheduler`` and two ``dask worker --resources GPU=1`` processes on 127.0.0.1, as
    deploy/dask/docker-compose.yml runs its GPU worker; stopped by PID at the end."""
    dask = str(Path(sys.executable).with_name("dask"))
    port = free_port()
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "start_new_session": True}
    scheduler = subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                                 **quiet)
    address = f"tcp://127.0.0.1:{port}"
    workers = [subprocess.Popen([dask, "worker", address, "--host", "127.0.0.1", "--nworkers", "1", "--nthreads",
                                 "1", "--resources", "GPU=1", "--no-dashboard"], **quiet) for _ in range(2)]
    try:
        with PrefectDaskClient(address, set_as_default=False, timeout=60) as client:
            client.wait_for_workers(2, timeout=120)
        yield address
    finally:  # each with its children (a worker's nanny runs it in a process of its own)
        for process in [*workers, scheduler]:
            os.killpg(process.pid, signal.SIGKILL)
        for process in [*workers, scheduler]:
            process.wait(timeout=30)


@pytest.mark.slow
def test_a_population_on_two_gpu_worker_processes_ends_as_in_process(gpu_workers: str) -> None:
    """Every job asks for one GPU (the LocalCluster test above checks the restriction on the
    scheduler); both ``GPU=1`` worker processes train jobs, since the setting is on each of
    them, and the leaderboard equals the in-process run's bit for bit."""
    local = evolution(4, 0.25).run(runner=run_serially)
    remote_run = evolution(4, 0.25)
    with PrefectDaskClient(gpu_workers, set_as_default=False) as client, get_task_stream(client) as stream:
        remote = remote_run.run(runner=run_on(DaskPool(client, remote_run.setting, gpu=True)))
    workers = [task["worker"] for task in stream.data if task["key"].startswith("run_job-")]  # train-agent-generation
    assert len(workers) == 4 * 2 and len(set(workers)) == 2  # every agent's job, both generations, on both
    assert_same(asdict(remote), asdict(local), "result")


def test_every_engine_the_config_allows_has_one_entry() -> None:
    assert set(ENGINES) == set(typing.get_args(TrainParams.model_fields["engine"].annotation))
    assert [name for name, engine in ENGINES.items() if engine.batched] == ["multiplexed"]


def test_in_process_is_the_default() -> None:
    with job_pool(TrainParams(), SETTING) as pool, job_runner(TrainParams(), SETTING) as runner:
        assert pool is None and isinstance(runner, KeptPPO)  # the generations' batched model, kept between them
    with job_runner(TrainParams(engine="serial"), SETTING) as runner:
        assert runner is run_serially


@pytest.mark.parametrize("address", ["localhost:8786", "http://host:8786", "inproc://x"])
def test_a_scheduler_address_must_be_tcp_or_tls(tmp_path: Path, address: str) -> None:
    path = tmp_path / "params.yaml"
    path.write_text(f"train:\n  dask: {address}\n")
    with pytest.raises(ConfigError) as err:
        load_params(path)
    message = str(err.value)
    assert message.startswith(str(path)) and "\n" not in message
    assert "train" in message and "tcp://host:8786" in message
    assert load_params(path, ["train.dask=tls://host:8786"]).train.dask == "tls://host:8786"
