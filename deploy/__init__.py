"""Services and deployment manifests (README.md, Layout): the container image and compose file,
the Kubernetes and Dask notes, and :mod:`deploy.local`, the local services of ``podracer up``.

``deploy`` sits at the top beside ``flows``: it may import ``tasks``, and nothing in ``tasks``
or ``trainers`` imports it (tests/tasks/test_layout.py).
"""
