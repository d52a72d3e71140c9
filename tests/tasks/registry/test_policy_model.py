"""A registered version's models-from-code file (tasks/registry/policy_model.py) names the pyfunc
by its module path, ``tasks.registry.serving``, and loads in a fresh interpreter, where nothing
has imported that module yet; no old module name is redirected (``tasks.serving`` does not exist)."""

import importlib.util
import subprocess
import sys

from tasks.registry.aliases import CHAMPION
from tasks.registry.register import register
from tests.conftest import REPO
from tests.tasks.registry.test_register_deliver import with_margin

LOAD = """
import sys, mlflow
mlflow.set_tracking_uri(sys.argv[1])
model = mlflow.pyfunc.load_model(sys.argv[2])
print(type(model.unwrap_python_model()).__module__)
print(model.predict(model.input_example)["order_qty"].tolist())
"""


def test_a_registered_version_names_the_pyfunc_by_its_module_and_loads_in_a_fresh_interpreter(built_copy):
    result = register(with_margin(built_copy, -1e9))
    stored = list((built_copy.registry.artifact_root / "models").rglob("policy_model.py"))
    assert len(stored) == 1 and "tasks.registry.serving" in stored[0].read_text()
    uri, tracking = f"models:/{result.model_name}@{CHAMPION}", built_copy.registry.tracking_uri
    loaded = subprocess.run([sys.executable, "-c", LOAD, tracking, uri], capture_output=True, text=True,
                            cwd=REPO)
    assert loaded.returncode == 0, loaded.stderr[-1500:]
    module, orders = loaded.stdout.splitlines()[-2:]
    assert module == "tasks.registry.serving" and orders.startswith("[")
    assert importlib.util.find_spec("tasks.serving") is None
