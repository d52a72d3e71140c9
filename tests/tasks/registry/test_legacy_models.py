"""Versions registered before ``tasks/`` was grouped still load (tasks/__init__.py: ``MOVED``).

Their stored models-from-code file imports the pyfunc from its old module path. The test
writes exactly that file into a registered version and loads it in a fresh interpreter,
where nothing has imported ``tasks.registry.serving`` yet.
"""

import subprocess
import sys

from tasks.registry.aliases import CHAMPION
from tasks.registry.register import register
from tests.conftest import REPO
from tests.tasks.registry.test_register_deliver import with_margin

OLD_MODULE = "serving"
"""The pyfunc's module name directly under ``tasks/``, before the grouping."""
OLD_CODE = f"from mlflow.models import set_model\n\nfrom tasks.{OLD_MODULE} import PolicyModel\n\nset_model(PolicyModel())\n"
LOAD = """
import sys, mlflow
mlflow.set_tracking_uri(sys.argv[1])
model = mlflow.pyfunc.load_model(sys.argv[2])
print(type(model.unwrap_python_model()).__module__)
print(model.predict(model.input_example)["order_qty"].tolist())
"""


def test_a_version_logged_with_the_old_module_path_loads_and_predicts(built_copy):
    result = register(with_margin(built_copy, -1e9))
    stored = list((built_copy.registry.artifact_root / "models").rglob("policy_model.py"))
    assert len(stored) == 1 and "tasks.registry.serving" in stored[0].read_text()
    uri, tracking = f"models:/{result.model_name}@{CHAMPION}", built_copy.registry.tracking_uri
    now = subprocess.run([sys.executable, "-c", LOAD, tracking, uri], capture_output=True, text=True,
                         cwd=REPO, check=True).stdout.splitlines()

    stored[0].write_text(OLD_CODE)
    old = subprocess.run([sys.executable, "-c", LOAD, tracking, uri], capture_output=True, text=True,
                         cwd=REPO)
    assert old.returncode == 0, old.stderr[-1500:]
    assert old.stdout.splitlines() == now and now[0] == "tasks.registry.serving"
