"""The local services of ``podracer up`` and the supervisor that keeps them alive
(docs/operations.md, The services and The supervisor).

``tasks/`` holds the pipeline's stages as plain functions grouped by stage; starting,
watching and stopping five server processes on 127.0.0.1 is none of them, but what
``deploy/`` holds: services and how they are deployed, here on one machine, beside the
container image and compose file that run the same services on a server (``deploy/compose.yaml``).

- :mod:`deploy.local.services`: the plan of the services, ``up``, ``down``, ``status``;
- :mod:`deploy.local.supervisor`: the process ``up`` leaves behind, which restarts a service
  that dies or stops answering;
- :mod:`deploy.local.processes`: how a service's process group is judged alive and stopped.

The one health check they judge a service by stays in ``tasks`` (:mod:`tasks.health`): the
trading client and the registry's tracking check use it too, and a stage never imports
``deploy``. Registering the MLflow webhook that ``up`` points at the receiver
(:func:`deploy.local.webhook.ensure_webhook`) lives here for the same reason: it needs the
services' addresses, and the registry part only receives the deliveries.
"""
