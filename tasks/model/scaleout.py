"""Where agent jobs run (finrl-podracer §4.3: the orchestrator spreads agents over workers).

``train.engine`` chooses, in one table (:data:`ENGINES`; nothing else tests an engine's name):

* ``multiplexed`` (the default): a generation's agents as one batched model in this process,
  the model and its buffers kept from one generation to the next
  (:class:`trainers.ppo.multiplex.KeptPPO`);
* ``serial``: one agent after another in this process;
* ``dask``: each agent's generation, or each tournament job, as the Prefect task
  :func:`train_agent` on the Dask cluster ``train.dask`` names: ``local`` (a
  ``LocalCluster`` of ``train.dask_workers`` processes on 127.0.0.1) or a scheduler address
  such as ``tcp://host:8786`` (``deploy/dask/``).

Jobs carry their agent's whole state and their own random streams, so where they run does
not change the result. Jobs and the market cross to the cluster on the CPU (a scheduler
unpickles task arguments and need not have a GPU); on CUDA each job asks Dask for one
``GPU`` resource and trains on its worker's device, so a worker started with
``--resources GPU=1`` runs one agent at a time.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tasks.config import TrainParams
from trainers.common.jobs import AgentJob
from trainers.population.dispatch import JobPool, Setting, gpu_turn, run_job
from trainers.population.evolution import JobRunner, run_serially
from trainers.ppo.multiplex import KeptPPO

if TYPE_CHECKING:
    from distributed import Client
    from prefect import Task

GPU = {"GPU": 1}
"""The Dask resource a job on CUDA asks for: one agent at a time per ``--resources GPU=1`` worker."""


@functools.cache
def train_agent() -> Task:
    """:func:`trainers.population.dispatch.run_job` as the Prefect task a Dask job runs as; made on
    first use, so that the in-process engines' training imports no Prefect."""
    from prefect import task
    from prefect.cache_policies import NO_CACHE

    return task(run_job, name="train-agent-generation", cache_policy=NO_CACHE)


NO_FIXED_PORT = {"dashboard_address": "127.0.0.1:0"}
"""The scheduler's HTTP routes (health, metrics; the dashboard stays off) on a free loopback
port: by default they take 8787, and a second cluster on the machine would warn and move."""


@contextmanager
def scheduler(dask: str, workers: int, gpu: bool) -> Iterator[str]:
    """The address of the scheduler ``train.dask`` names; for ``local``, a ``LocalCluster`` of
    ``workers`` processes on 127.0.0.1 (each with one ``GPU`` resource on CUDA) for the block."""
    if dask != "local":
        yield dask
        return
    from distributed import LocalCluster

    with _shared_prefect_api(), _quiet("distributed"), LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None,
            scheduler_kwargs=NO_FIXED_PORT, resources=GPU if gpu else None, silence_logs=logging.WARNING) as cluster:
        yield cluster.scheduler_address


@contextmanager
def _quiet(name: str) -> Iterator[None]:
    """Only warnings from logger ``name`` for the block: a local cluster's start and stop are
    routine, and its INFO lines would bury the run's progress."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


@contextmanager
def _shared_prefect_api() -> Iterator[None]:
    """Local workers report task runs to this process's Prefect API. Workers take the API URL
    from the settings each task carries; with none set, every worker process would start a
    temporary server of its own (tens of seconds each, all on one database file)."""
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_EPHEMERAL_ENABLED, temporary_settings

    if PREFECT_API_URL.value() or not PREFECT_SERVER_EPHEMERAL_ENABLED.value():
        yield
        return
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()  # the one Prefect's client starts in this process when no URL is set
    server.start()
    with temporary_settings(updates={PREFECT_API_URL: server.api_url}):
        yield


class DaskPool:
    """A :class:`~trainers.population.dispatch.JobPool` on Dask: jobs come back in the order they
    really finish (tournament mode has no generation barrier; :func:`run_on` waits for all).

    Each job runs as the Prefect task :func:`train_agent`, submitted through prefect-dask's
    client, so its task run nests under whatever flow or task run is current. The pool opens
    no flow run of its own: a flow's task runner (and its Dask client) ends with the flow
    function, while the pool outlives the calls of the loop that drives it. The setting
    (market data included) goes to every worker once and every job refers to it. Closing the
    ``client`` drops the jobs still pending (:func:`dask_pool` does that when its block ends).
    """

    def __init__(self, client: Client, setting: Setting, gpu: bool) -> None:
        from distributed import as_completed

        self._client, self.setting = client, setting
        self._resources = GPU if gpu else None
        # on every worker: held by one, the setting would draw every job there (Dask schedules
        # a task where its inputs are, and a market of GBs is never worth stealing for). Dask's
        # Active Memory Manager drops, every 2 s by default, each replica no waiting task needs,
        # so between two generations it would leave the setting on one worker again; it is
        # stopped for the cluster (docs/evolution.md, Engines)
        client.amm.stop()
        self._setting = client.scatter(setting.shipped(), broadcast=True, hash=False)
        self._finished = as_completed(loop=client.loop)
        self._submitted = 0
        self._jobs: dict[str, AgentJob] = {}
        """The pending jobs' inputs by Dask key, in submission order (``_finished`` holds their futures)."""

    def submit(self, job: AgentJob) -> None:
        """Start training ``job`` on the cluster (on CUDA: on the ``GPU`` workers in turn, :func:`gpu_turn`)."""
        where = gpu_turn(self._client.scheduler_info()["workers"], self._submitted) if self._resources else {}
        self._submitted += 1
        future = self._client.submit(train_agent(), job.shipped(), self._setting, resources=self._resources, pure=False,
                                     **where)
        self._jobs[future.key] = job
        self._finished.add(future)

    def next_finished(self) -> AgentJob:
        """Block until a submitted job finishes and return its result; it is no longer pending,
        even when it failed (its exception is raised here). Raises ``RuntimeError`` when no job is pending."""
        if not self._jobs:
            raise RuntimeError("no job in the pool")
        future = next(self._finished)
        del self._jobs[future.key]
        return future.result()

    def pending(self) -> list[AgentJob]:
        """The inputs of the jobs submitted and not yet handed back, in submission order."""
        return list(self._jobs.values())


def run_on(pool: DaskPool) -> JobRunner:
    """A generation's jobs through ``pool``, all submitted at once and returned in order."""

    def run(jobs: list[AgentJob], setting: Setting) -> list[AgentJob]:
        assert setting is pool.setting, "the pool was opened for another run"
        for job in jobs:
            pool.submit(job)
        return sorted((pool.next_finished() for _ in jobs), key=lambda job: job.index)

    return run


@contextmanager
def dask_pool(train: TrainParams, setting: Setting) -> Iterator[DaskPool]:
    """A :class:`DaskPool` on the cluster ``train.dask`` names, for as long as the block."""
    from prefect_dask.client import PrefectDaskClient

    gpu = setting.data.close.is_cuda
    with (scheduler(train.dask, train.dask_workers, gpu) as address,
          PrefectDaskClient(address, set_as_default=False) as client):
        yield DaskPool(client, setting, gpu)


@contextmanager
def dask_runner(train: TrainParams, setting: Setting) -> Iterator[JobRunner]:
    """A generation's jobs on the cluster ``train.dask`` names (:func:`run_on` a :class:`DaskPool`)."""
    with dask_pool(train, setting) as pool:
        yield run_on(pool)


def in_process(runner: JobRunner) -> Callable[[TrainParams, Setting], AbstractContextManager[JobRunner]]:
    """``runner``, in this process: nothing to open or close."""
    return lambda train, setting: nullcontext(runner)


def no_pool(train: TrainParams, setting: Setting) -> AbstractContextManager[None]:
    """No pool: a tournament runs its jobs one at a time in this process, in the order its
    simulated pool of ``tournament.workers`` would finish them."""
    return nullcontext(None)


@dataclass(frozen=True)
class Engine:
    """One ``train.engine``: what a generation's jobs run on, what a pooled mode's (a
    tournament's) jobs run on, and whether it batches a generation's agents."""

    name: str
    runner: Callable[[TrainParams, Setting], AbstractContextManager[JobRunner]]
    """The generational mode's job runner, open for the block."""
    pool: Callable[[TrainParams, Setting], AbstractContextManager[JobPool | None]]
    """A pooled mode's :class:`~trainers.population.dispatch.JobPool`, open for the block; None: in this process."""
    batched: bool
    """A generation's agents train as one batched model: its results agree with the other
    engines' only up to float summation order (the checkpoint key tells them apart), and a
    tournament's jobs, which come one at a time, gain nothing from it."""


ENGINES: Mapping[str, Engine] = {engine.name: engine for engine in (
    Engine(name="multiplexed", runner=lambda train, setting: KeptPPO(), pool=no_pool, batched=True),
    Engine(name="serial", runner=in_process(run_serially), pool=no_pool, batched=False),
    Engine(name="dask", runner=dask_runner, pool=dask_pool, batched=False),
)}
"""Every engine, by ``train.engine``'s name."""
