"""The folder tree reads as the data flow: a lower part never imports a higher one.

Every ``tasks`` import is read from the source with ``ast``, including imports inside
functions and under ``TYPE_CHECKING``, so a lazy import cannot hide an upward edge or a circle.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

from tests.conftest import REPO

RANK = {"data": 1, "model": 2, "registry": 3, "delivery": 4}
"""A module's part and its place in the flow; the shared top-level modules rank 0."""


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Absolute ``tasks`` / ``flows`` / ``trainers`` / third-party modules that ``path`` imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def rank(module: str) -> int:
    parts = module.split(".")
    return RANK.get(parts[1], 0) if len(parts) > 1 else 0


def task_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((REPO / "tasks").rglob("*.py"))}


def task_graph() -> dict[str, set[str]]:
    """Module -> the ``tasks`` modules it imports (a name imported from a package counts when it is a module)."""
    modules = task_modules()
    return {name: {m for m in imports(path) if m in modules and m != name} for name, path in modules.items()}


def test_every_part_imports_only_its_own_level_or_lower():
    upward = [f"{name} imports {dep}" for name, deps in task_graph().items() for dep in deps
              if rank(dep) > rank(name) and dep != "tasks"]
    assert upward == []


def test_the_shared_modules_import_no_part():
    shared = [name for name in task_modules() if name.count(".") == 1 and rank(name) == 0]
    assert {"tasks.config", "tasks.errors", "tasks.storage", "tasks.caching"} <= set(shared)
    assert [(n, d) for n in shared for d in task_graph()[n] if rank(d) > 0] == []


def test_tasks_import_no_circle():
    graph = {name: deps - {"tasks"} for name, deps in task_graph().items()}
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        pytest.fail(f"import circle: {' -> '.join(exc.args[1])}")
    assert order.index("tasks.data.synthetic_daily") < order.index("tasks.data.synthetic_intraday") < \
        order.index("tasks.data.synthetic")


def test_each_part_has_a_docstring_and_trainers_stay_pure_pytorch():
    for part in RANK:
        assert ast.get_docstring(ast.parse((REPO / "tasks" / part / "__init__.py").read_text()))
    banned = ("tasks", "flows", "prefect", "mlflow")
    leaks = [f"{p.relative_to(REPO)} imports {m}" for p in (REPO / "trainers").rglob("*.py") for m in imports(p)
             if m.split(".")[0] in banned]
    assert leaks == []


def test_the_trading_client_reaches_the_broker_only_through_its_start_function():
    """docs/delivery.md: the two parts of delivery meet over HTTP. No client module imports the
    broker package, except the one helper that starts a local broker, and it only the broker's
    public entry point; no broker module imports the client."""
    door = {"tasks.delivery.broker.service", "tasks.delivery.broker.service.start"}
    modules = task_modules()
    client = {n: imports(p) for n, p in modules.items() if n.startswith("tasks.delivery.client")}
    broker = {n: imports(p) for n, p in modules.items() if n.startswith("tasks.delivery.broker")}
    assert client and broker and client["tasks.delivery.client.local"] & door == door
    leaks = [f"{name} imports {m}" for name, found in client.items() for m in found
             if m.startswith("tasks.delivery.broker") and not (name == "tasks.delivery.client.local" and m in door)]
    leaks += [f"{name} imports {m}" for name, found in broker.items() for m in found
              if m.startswith("tasks.delivery.client")]
    assert leaks == []
    for part in ("tasks.delivery.broker", "tasks.delivery.client"):  # each says what it holds
        assert ast.get_docstring(ast.parse(modules[part].read_text())), part


def test_the_local_services_sit_at_the_top_beside_flows():
    """``deploy/local`` (the services of ``podracer up``) may use ``tasks``, but no stage and no
    trainer imports ``deploy``, and ``deploy`` imports no flow: the CLI starts the services'
    commands by name, so the two top parts never import each other in a circle."""
    local = sorted((REPO / "deploy" / "local").glob("*.py"))
    assert {p.stem for p in local} >= {"__init__", "services", "supervisor", "processes"}
    assert ast.get_docstring(ast.parse((REPO / "deploy" / "local" / "__init__.py").read_text()))
    below = [f"{p.relative_to(REPO)} imports {m}" for part in ("tasks", "trainers") for p in (REPO / part).rglob("*.py")
             for m in imports(p) if m.split(".")[0] == "deploy"]
    assert below == []
    up = [f"{p.relative_to(REPO)} imports {m}" for p in local for m in imports(p) if m.split(".")[0] == "flows"]
    assert up == []
    assert [m for m in task_modules() if m.rsplit(".", 1)[-1] in ("services", "supervisor", "processes")] == []


def test_loading_the_config_imports_no_torch():
    """trainers/config.py holds the trainers' config classes without torch, so a command that
    needs no training (the broker, ``status``, ``promote``) starts without paying for it."""
    probe = "import sys, tasks.config; print(sorted(m for m in ('torch', 'trainers.common.env') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_trainers_import_no_circle():
    modules = {module_name(p): p for p in sorted((REPO / "trainers").rglob("*.py"))}
    graph = {name: {m for m in imports(path) if m in modules and m not in (name, "trainers")}
             for name, path in modules.items()}
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as exc:
        pytest.fail(f"import circle: {' -> '.join(exc.args[1])}")
    assert order.index("trainers.config") < order.index("trainers.common.orders") < order.index("trainers.common.env")


def benchmark_modules() -> list[Path]:
    return sorted((REPO / "benchmarks").rglob("*.py"))


def test_no_benchmark_imports_the_test_suite():
    """The benchmarks are a package a user runs (docs/benchmarks.md): what they share with the
    tests lives in ``standins/``, never in ``tests/``."""
    assert benchmark_modules()
    leaks = [f"{p.relative_to(REPO)} imports {m}" for p in benchmark_modules() for m in imports(p)
             if m.split(".")[0] == "tests"]
    assert leaks == []


def test_no_benchmark_edits_the_import_path():
    """Each benchmark runs as ``python -m benchmarks.…`` from the repository root, so none needs
    to put a folder on ``sys.path``: none so much as names it."""
    named = [f"{path.relative_to(REPO)}:{node.lineno}" for path in benchmark_modules()
             for node in ast.walk(ast.parse(path.read_text(), str(path)))
             if (isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name)
                 and node.value.id == "sys")
             or (isinstance(node, ast.ImportFrom) and node.module == "sys"
                 and any(a.name == "path" for a in node.names))]
    assert named == []


def test_the_pipeline_imports_no_stand_in():
    """``standins/`` serves tests and benchmarks (standins/__init__.py); the shipped pipeline
    never imports it."""
    leaks = [f"{p.relative_to(REPO)} imports {m}" for part in ("flows", "tasks", "trainers")
             for p in (REPO / part).rglob("*.py") for m in imports(p) if m.split(".")[0] == "standins"]
    assert leaks == []




LEARNERS = frozenset({"ppo", "sac"})
"""The learners' names: only trainers/algorithms.py, their table, may test a name."""


def name_tests(source: str, where: str) -> list[str]:
    """``where:line`` of every comparison or ``match`` case in ``source`` with a learner's name as a
    string literal among its operands (``algorithm == "sac"``, ``algorithm != "ppo"``, ``a in ("ppo", x)``,
    ``{"ppo"} != set(pool)``, ``case "sac":``). A name elsewhere (a default, a dict key, a
    docstring) is not a test of it."""
    def named(node: ast.AST) -> bool:
        return any(isinstance(n, ast.Constant) and n.value in LEARNERS for n in ast.walk(node))

    found = []
    for node in ast.walk(ast.parse(source, where)):
        if isinstance(node, ast.Compare) and any(named(n) for n in (node.left, *node.comparators)):
            found.append(f"{where}:{node.lineno}")
        elif isinstance(node, ast.MatchValue) and named(node.value):
            found.append(f"{where}:{node.lineno}")
    return found


def test_only_the_algorithms_table_tests_a_learners_name():
    """Which learner runs is looked up in ``trainers.algorithms.ALGORITHMS``, never decided by a
    string test spread over the tree (docs/design.md)."""
    table = REPO / "trainers" / "algorithms.py"
    sources = [p for part in ("trainers", "tasks", "flows", "benchmarks") for p in sorted((REPO / part).rglob("*.py"))]
    assert table in sources and len(sources) > 100
    planted = 'def f(algorithm, pool):\n' \
        '    if algorithm == "sac" or "ppo" not in pool or {"ppo"} != set(pool):\n        pass\n' \
        'def g(algorithm):\n    match algorithm:\n        case "sac":\n            pass\n'
    assert name_tests(planted, "planted") == ["planted:2", "planted:2", "planted:2", "planted:6"]
    not_tests = 'ALGORITHM = "ppo"\nPOOLS = {"sac": 1.0}\ndef f(algorithm: str = "ppo") -> str:\n    return algorithm\n'
    assert name_tests(not_tests, "x") == []
    hits = [hit for p in sources if p != table for hit in name_tests(p.read_text(), str(p.relative_to(REPO)))]
    assert hits == []


RUN_MODES = frozenset({"generational", "tournament"})
"""The run modes' names: only their table, trainers/population/modes.py, says what a mode does."""
ENGINES = frozenset({"multiplexed", "serial", "dask"})
"""The engines' names: only their table, tasks/model/scaleout.py, says where an engine's jobs run."""


def mode_tests(source: str, where: str) -> list[str]:
    """``where:line`` of every comparison or ``match`` case in ``source`` that tests a run mode's
    name (a mode's name as a string literal among its operands: ``evo.mode == "tournament"``,
    ``kind in ("generational", x)``) or an engine's (an engine's name beside a name or attribute
    that says engine: ``params.train.engine != "dask"``, ``case "serial":`` under
    ``match train.engine``). A name elsewhere (a default, a table's entry or a lookup in it, a
    dict key, a section called ``dask``) is not a test of it."""
    def literals(node: ast.AST) -> set[object]:
        """The operand's value when it is a literal, or its elements' when it is a tuple, list or set of them."""
        if isinstance(node, ast.Constant):
            return {node.value}
        if isinstance(node, ast.MatchValue):
            return literals(node.value)
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return set().union(*(literals(n) for n in node.elts))
        return set()

    def says_engine(node: ast.AST) -> bool:
        return any("engine" in (n.id if isinstance(n, ast.Name) else n.attr) for n in ast.walk(node)
                   if isinstance(n, ast.Name | ast.Attribute))

    def tests(operands: list[ast.AST]) -> bool:
        found = set().union(*(literals(n) for n in operands))
        return bool(found & RUN_MODES) or bool(found & ENGINES) and any(says_engine(n) for n in operands)

    found = []
    for node in ast.walk(ast.parse(source, where)):
        if isinstance(node, ast.Compare) and tests([node.left, *node.comparators]):
            found.append(f"{where}:{node.lineno}")
        elif isinstance(node, ast.Match):
            found += [f"{where}:{case.pattern.lineno}" for case in node.cases if tests([node.subject, case.pattern])]
    return sorted(found, key=lambda hit: int(hit.rsplit(":", 1)[1]))


def test_only_the_mode_and_engine_tables_test_a_modes_or_an_engines_name():
    """What a run mode does is looked up in ``trainers.population.modes.MODES`` and where an
    engine runs jobs in ``tasks.model.scaleout.ENGINES``, never decided by a string test spread
    over the tree (docs/evolution.md). The tables themselves need no such test either."""
    sources = [p for part in ("trainers", "tasks", "flows", "benchmarks") for p in sorted((REPO / part).rglob("*.py"))]
    assert REPO / "trainers" / "population" / "modes.py" in sources and len(sources) > 100
    planted = 'def f(params, evo, kind):\n    tournament = evo.mode == "tournament"\n' \
        '    if params.train.engine != "dask" or kind in ("generational", None):\n        pass\n' \
        '    match params.train.engine:\n        case "serial":\n            pass\n'
    assert mode_tests(planted, "planted") == ["planted:2", "planted:3", "planted:3", "planted:6"]
    not_tests = 'def f(mode: str = "generational", engine: str = "multiplexed") -> bool:\n' \
        '    return "dask" in SECTIONS and mode == "stream" and MODES["tournament"] is not None\n'
    assert mode_tests(not_tests, "x") == []
    hits = [hit for p in sources for hit in mode_tests(p.read_text(), str(p.relative_to(REPO)))]
    assert hits == []
