"""The README and docs/usage.md keep their promises: their example commands run as written,
at tiny size, and what the README points to exists.

Every ``podracer ...`` line in the bash blocks of those two pages is read from the pages
themselves, so a new example is tested the day it is written:

* every command parses (command and options exist) and its ``-s`` settings load with the
  repository's ``params.yaml``;
* every command that sets ``data.*`` runs its data stages (ingest, validate, features) with
  the repository's ``params.yaml``: a source whose defaults do not fit (``-s
  data.source=arch-demo`` once ended in "the validation split has 0 bars") fails here;
* (slow) every command runs as a process in a tiny project, in the README's order, except
  the ones that serve until stopped (:data:`SERVE`): in the project of
  tests/flows/test_cli_commands.py, after its own commands (which include the README's
  stage-by-stage example); one that switches ``data.source`` runs in a fresh project of its
  own, here.

Every ``make`` target it names is in the Makefile, every folder of its layout table and every
file it links to exists, and every page under docs/ is reachable from it.
"""

from __future__ import annotations

import gzip
import re
import shlex
from datetime import date
from pathlib import Path

import pandas as pd
import pytest
import typer
import yaml

from flows.cli import app
from standins.tiny import TINY
from tasks.config import apply_override, load_params
from tests.conftest import REPO

README = REPO / "README.md"
COMMAND_PAGES = (README, REPO / "docs" / "usage.md")
"""The pages whose ``podracer`` lines a new user copies."""
BLOCK = re.compile(r"```bash\n(.*?)```", re.S)
SERVE = {("broker",): "serves until stopped (tests/flows/test_cli_commands.py starts and stops it)",
         ("trade",): "trades every new bar until stopped (--once and --replay run here)",
         ("up",): "starts the local servers (tests/flows/test_services.py)",
         ("status",): "reports on `up`'s servers (tests/flows/test_services.py)",
         ("down",): "stops `up`'s servers (tests/flows/test_services.py)"}
"""Commands the slow test leaves to the tests named, with why."""


def readme_commands(text: str | None = None) -> list[list[str]]:
    """The ``podracer`` command lines of :data:`COMMAND_PAGES` (or of ``text``), in order, as
    argument lists, comments cut; ``podracer ingest | validate | ...`` is one command per stage."""
    out: list[list[str]] = []
    text = text if text is not None else "\n".join(page.read_text() for page in COMMAND_PAGES)
    for block in BLOCK.findall(text):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if not words or words[0] not in ("podracer", ".venv/bin/podracer"):
                continue
            if "|" in words:
                out += [[w] for w in words[1:] if w != "|"]
            else:
                out.append(words[1:])
    return out


LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)")


def local_links(text: str) -> list[str]:
    """The targets of a page's relative markdown links, anchors cut."""
    return [link for link in LINK.findall(text) if "://" not in link]


def test_every_make_target_the_readme_names_is_in_the_makefile():
    text = README.read_text()
    named = set(re.findall(r"\bmake ([a-z][a-z-]*)", text))
    targets = set(re.findall(r"^([a-z][a-z-]*):", (REPO / "Makefile").read_text(), re.M))
    assert {"run", "test"} <= named
    assert named <= targets, f"not in the Makefile: {sorted(named - targets)}"


def test_every_folder_of_the_layout_and_every_linked_file_exists():
    text = README.read_text()
    layout = text.split("## Layout", 1)[1].split("\n## ", 1)[0]
    folders = re.findall(r"^\| `([^`]+/)` \|", layout, re.M)
    assert "flows/" in folders and "trainers/" in folders
    links = local_links(text)
    assert "docs/results.md" in links
    for path in [*folders, *links]:
        assert (REPO / path).exists(), f"README names {path}, which does not exist"


def test_every_page_under_docs_is_reachable_from_the_readme():
    """Linked from the README, or from a page the README links (an archive, say)."""
    reached = {(REPO / link).resolve() for link in local_links(README.read_text())}
    for page in [p for p in reached if p.suffix == ".md" and p.exists()]:
        reached |= {(page.parent / link).resolve() for link in local_links(page.read_text())}
    missing = [p.name for p in sorted((REPO / "docs").glob("*.md")) if p.resolve() not in reached]
    assert not missing, f"docs not reachable from the README: {missing}"


def overrides(args: list[str]) -> list[str]:
    return [args[i + 1] for i, word in enumerate(args[:-1]) if word in ("-s", "--set")]


def test_the_readme_lists_the_data_commands():
    commands = readme_commands()
    assert ["run", "-s", "data.source=arch-demo"] in commands
    assert ["ingest"] in commands and ["deliver"] in commands  # the `ingest | validate | ...` line, split
    assert readme_commands("```bash\npodracer a -s x=1   # note\nmake run\n```") == [["a", "-s", "x=1"]]


def test_every_readme_command_parses_and_its_settings_load():
    group = typer.main.get_command(app)
    for args in readme_commands():
        # an unknown command or option raises click's UsageError
        context = group.make_context("podracer", list(args))
        name, command, rest = group.resolve_command(context, list(args))  # type: ignore[attr-defined]
        command.make_context(name, rest, parent=context)
        load_params(REPO / "params.yaml", overrides(args))  # a bad key or value raises ConfigError


def example_file(path: Path, columns: dict[str, str]) -> None:
    """A small daily file at ``path`` with the README's column names (the mapping inverted),
    date-only timestamps as downloads have them, compressed as the name says."""
    from tasks.data.synthetic import iter_synthetic_bars

    bars = pd.concat(iter_synthetic_bars(2, date(2019, 1, 1), date(2021, 12, 31), 0.5, 7, freq="1d"))
    frame = bars.assign(ts=bars["ts"].dt.strftime("%Y-%m-%d")).rename(columns={v: k for k, v in columns.items()})
    text = frame.to_csv(index=False).encode()
    path.write_bytes(gzip.compress(text) if path.name.endswith(".gz") else text)


def prepare(args: list[str], folder: Path) -> None:
    """Put the file a README command reads (``data.path=...``) into ``folder``."""
    settings = dict(o.split("=", 1) for o in overrides(args))
    if settings.get("data.source") == "file":
        example_file(folder / settings["data.path"], yaml.safe_load(settings.get("data.columns", "{}")))


DATA_COMMANDS = [args for args in readme_commands() if any(o.startswith("data.") for o in overrides(args))]


@pytest.mark.parametrize("args", DATA_COMMANDS, ids=[" ".join(a) for a in DATA_COMMANDS])
def test_readme_data_commands_run_their_data_stages_with_the_repos_params(tmp_path, monkeypatch, args):
    from tasks.data.features import features
    from tasks.data.ingest import ingest
    from tasks.data.validate import validate

    monkeypatch.chdir(tmp_path)
    prepare(args, tmp_path)
    params = load_params(REPO / "params.yaml", ["data.symbols=4", *overrides(args), f"data_dir={tmp_path / 'data'}"])
    ingest(params)
    validate(params)
    result = features(params)
    assert result.bars > 0 and set(result.splits) == {"train", "validation", "test"}


def tiny_project(root: Path, dates: bool = False) -> None:
    """params.yaml at tiny size; without ``dates``, without dates or splits (each README source
    brings its own)."""
    tree: dict = {}
    dated = ("data.start", "data.end", "features.train_end", "features.val_end")
    for assignment in [*TINY, "registry.gate_margin=-1000"]:
        if not dates and assignment.split("=", 1)[0] in dated:
            continue
        apply_override(tree, assignment)
    (root / "params.yaml").write_text(yaml.safe_dump(tree, default_flow_style=None))


# A command naming another shipped config (-p params.minute.yaml) would run it at full size here;
# tests/flows/test_pipeline.py and test_ct_cycle.py run that config at tiny size.
RUNNABLE = [a for a in readme_commands() if tuple(a) not in SERVE and "-p" not in a]
ELSEWHERE = [a for a in RUNNABLE if any(o.startswith("data.source=") for o in overrides(a))]
"""Commands that switch data.source: each runs in a fresh project of its own, as a new user
tries it (the project's paper account, data/broker/broker.db, belongs to one market)."""


@pytest.mark.slow
@pytest.mark.parametrize("args", ELSEWHERE, ids=[" ".join(a) for a in ELSEWHERE])
def test_a_readme_command_on_another_source_runs_in_a_fresh_project(tmp_path, prefect_server, args):
    from tests.flows.test_cli_commands import say

    tiny_project(tmp_path)
    prepare(args, tmp_path)
    say(tmp_path, *args)
