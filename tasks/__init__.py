"""Pipeline stages as plain functions, each also wrapped as a Prefect task.

The plain functions are testable without a Prefect server; ``flows/`` composes the task
wrappers and ``dvc.yaml`` runs the same functions through the ``podracer`` CLI.
"""
