"""Scale-out of the evolution on Dask: each agent's generation as a Prefect task
(finrl-podracer.txt §4.3: the orchestrator spreads agents over workers).

``train.dask`` chooses where a generation's agent jobs (:class:`trainers.population.AgentJob`) run:

* unset (the default): one after another in this process;
* ``local``: a Dask ``LocalCluster`` of ``train.dask_workers`` processes bound to 127.0.0.1;
* ``tcp://host:8786``: an existing scheduler, e.g. the one in ``deploy/dask/``.

Jobs carry their agent's whole state and their own random streams, so where they run
does not change the result. On CUDA each job asks Dask for one ``GPU`` resource, so a
worker started with ``--resources GPU=1`` runs one agent at a time on its device.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

from prefect import flow, task, unmapped
from prefect.cache_policies import NO_CACHE

from tasks.config import TrainParams
from trainers.evolution import JobRunner, run_serially
from trainers.population import AgentJob, Setting, run_job

train_agent = task(run_job, name="train-agent-generation", cache_policy=NO_CACHE)


def dask_runner(address: str, gpu: bool) -> JobRunner:
    """Runs a generation's jobs as Prefect tasks on the Dask scheduler at ``address``."""
    import dask
    from prefect_dask import DaskTaskRunner

    def run(jobs: list[AgentJob], setting: Setting) -> list[AgentJob]:
        # The jobs travel as closure values, not flow parameters: Prefect records
        # parameters with the flow run, and tensors are not for its database.
        @flow(name="train-generation", task_runner=DaskTaskRunner(address=address), log_prints=False)
        def generation() -> list[AgentJob]:
            with dask.annotate(resources={"GPU": 1}) if gpu else nullcontext():
                futures = train_agent.map(jobs, unmapped(setting))
            return [future.result() for future in futures]

        return generation()

    return run


@contextmanager
def job_runner(train: TrainParams, gpu: bool) -> Iterator[JobRunner]:
    """The job runner ``train.dask`` asks for; a local cluster lives as long as the block."""
    if train.dask is None:
        yield run_serially
    elif train.dask == "local":
        from distributed import LocalCluster

        resources = {"GPU": 1} if gpu else None
        with LocalCluster(n_workers=train.dask_workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                          dashboard_address=None, resources=resources) as cluster:
            yield dask_runner(cluster.scheduler_address, gpu)
    else:
        yield dask_runner(train.dask, gpu)
