"""Models-from-code entry point of the pyfunc: MLflow runs this file when loading the model.

Logging the model by file path, rather than pickling a Python object, keeps the stored
model free of cloudpickle and makes the loaded class the one in :mod:`tasks.registry.serving`.
"""

from mlflow.models import set_model

from tasks.registry.serving import PolicyModel

set_model(PolicyModel())
