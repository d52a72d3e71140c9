"""What the benchmarks share: a market built through the pipeline's stages 1–3 in a scratch
folder, the seed lists of their command lines, and each benchmark's section of
docs/benchmarks.md.

**Markets.** :func:`build_features` runs ingest, validate and features (docs/data.md) as the
pipeline does, into ``params.data_dir``; :func:`build_market` does it for one market kind and
seed (:func:`market_params`) and returns the windows and scales every arm is scored with.
The pipeline's modules are imported inside these functions: a benchmark's measured child
process imports this module to record, and its peak memory must not include the pipeline;
the device script, on a machine without the pipeline's packages, imports :func:`commit`.

**Sections and history.** A section sits between ``<!-- benchmark: KEY -->`` and
``<!-- end: KEY -->``; a run replaces it with its latest reading and the line that dates it,
and appends its row to ``docs/history/KEY.csv`` (one file per benchmark, one row per run, in time order;
docs/history/README.md, How a reading is kept). A row starts with the date and :func:`commit`, the
commit the figures were measured on. A section not yet in the file is appended.
A run also rewrites ``docs/history/README.md``, every CSV as a table (:func:`history_page`;
``python -m benchmarks.history`` rewrites it by hand).
"""

from __future__ import annotations

import csv
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tasks.config import Params
    from tasks.data.feature_set import FeatureSet
    from trainers.common.env import MarketData
    from trainers.common.evaluate import Policy
    from trainers.common.nets import Actor
    from trainers.common.state import StateScales
    from trainers.config import PPOConfig, SACConfig

ROOT = Path(__file__).resolve().parents[1]
"""The repository root: params.yaml and docs/ are read and written here."""
DOCS = ROOT / "docs" / "benchmarks.md"
ARCHIVE = ROOT / "docs" / "benchmarks-archive.md"
"""The sections of the finished studies in ``benchmarks/archive/``, apart from the benchmarks rerun after changes."""
HEAD = ("# Benchmarks\n\nEach benchmark in `benchmarks/` keeps a section here: its latest reading and when it "
        "was taken.\n")
HISTORY = "history"
"""The folder beside docs/benchmarks.md that holds one CSV per benchmark, a row per run."""

ARCH_DEMO = ["data.source=arch-demo", "data.start=1999-01-01", "data.end=2018-12-31",
             "features.train_end=2012-12-31", "features.val_end=2015-12-31"]
"""arch-demo's history is 1999–2018: train to 2012, validate 2013–2015, test 2016–2018."""
MARTINGALE = ["data.signal=0", "data.martingale=true"]
"""The true null (docs/data.md, the martingale market): every price a martingale, so every
strategy's true Sharpe is buy-and-hold's; the gate benchmark measures a gate's size on it."""
KINDS = {"learnable": [], "null": ["data.signal=0"], "martingale": MARTINGALE, "arch-demo": ARCH_DEMO, "minute": []}
"""Each market kind's overrides of its params file (:data:`BASES`): ``learnable`` is the embedded
market as shipped, ``null`` the same with nothing to learn (``data.signal: 0``), ``arch-demo`` 2 real
indices, ``minute`` params.minute.yaml's market and learner as shipped."""
BASES = {"minute": "params.minute.yaml"}
"""The market kinds read from another params file than params.yaml."""


def seeds_of(text: str) -> list[int]:
    """Seeds on a command line: ``7-16`` (a range, both ends in), ``7,8,9`` or ``7``."""
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in text.split(",")]


# ---- markets through stages 1–3 ---------------------------------------------------------------

def build_features(params: Params) -> FeatureSet:
    """Ingest, validate and features into ``params.data_dir``, as the pipeline's stages 1–3 run
    them; the feature set they wrote."""
    from tasks.data import feature_set, features, ingest, validate

    for stage in (ingest.ingest, validate.validate, features.features):
        stage(params)
    return feature_set.load(params.dirs.features)


def default_features(workdir: Path) -> tuple[Params, FeatureSet]:
    """params.yaml's market (the default embedded one) built under ``workdir``."""
    from tasks.config import load_params

    params = load_params(ROOT / "params.yaml", [f"data_dir={workdir / 'data'}"])
    return params, build_features(params)


def market_params(root: Path, market: str, seed: int, overrides: list[str]) -> Params:
    """params.yaml (or the kind's own file, :data:`BASES`) for ``market`` (a key of :data:`KINDS`) at
    ``seed`` (``data.seed`` and ``evolution.seed``), its data in ``root/MARKET-SEED/data``;
    ``overrides`` apply last."""
    from tasks.config import load_params

    return load_params(ROOT / BASES.get(market, "params.yaml"),
                       [f"data_dir={root / f'{market}-{seed}' / 'data'}", f"data.seed={seed}", f"evolution.seed={seed}",
                        *KINDS[market], *overrides])


def blank_actor(data: MarketData, scales: StateScales, cfg: PPOConfig | SACConfig) -> Actor:
    """A deterministic actor of ``cfg``'s shape for ``data``, to load trained weights into."""
    from trainers.common.nets import ActorShape, new_actor

    return new_actor(ActorShape.of(data.n_stocks, data.n_features, scales, cfg.policy), cfg.net_dims)


@dataclass(frozen=True)
class Market:
    """One seed's market after ingest, validation and features, with its windows."""

    params: Params
    fs: FeatureSet
    data: MarketData
    scales: StateScales
    train: tuple[int, int]
    val: tuple[int, int]
    test: tuple[int, int]
    per_year: float

    def metrics(self, policy: Policy, window: tuple[int, int]) -> dict[str, float]:
        """``policy``'s performance on ``window``, traded by the env's rules (next-open fills, costs)."""
        from trainers.common.evaluate import run_policy
        from trainers.common.metrics import performance

        return performance(run_policy(policy, self.data, self.scales, self.params.env, window), self.per_year)

    def actor(self, weights: dict, hparams: dict[str, float]) -> Actor:
        """The deterministic actor of ``hparams``' shape with ``weights``."""
        actor = blank_actor(self.data, self.scales, self.params.ppo.with_hparams(hparams))
        actor.load_state_dict(weights)
        return actor


def build_market(root: Path, market: str, seed: int, overrides: list[str]) -> Market:
    """Run stages 1–3 for ``market`` at ``seed`` into ``root``."""
    from tasks.model.plan import state_scales
    from trainers.common.metrics import periods_per_year

    params = market_params(root, market, seed, overrides)
    fs = build_features(params)
    return Market(params, fs, fs.market(), state_scales(params, fs), fs.window("train"), fs.window("validation"),
                  fs.window("test"), periods_per_year(params.data.freq))


# ---- sections of docs/benchmarks.md ----------------------------------------------------------

@dataclass(frozen=True)
class Reading:
    """One run of a benchmark: its latest-reading text and its row of the history (docs/history/KEY.csv)."""

    key: str  # the section's marker, e.g. "ceiling"
    title: str  # the section's heading
    latest: str  # markdown: the command that reproduces it, the machine, the tables
    columns: tuple[str, ...]  # the history CSV's header: "date", "commit", then the benchmark's own
    row: tuple[str, ...]  # this run's cells, in the order of ``columns``: now(), commit(), ...


def now() -> str:
    """The date a history row is stamped with (UTC, to the minute)."""
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


def commit() -> str:
    """The commit the tree was at (``git rev-parse --short HEAD``), ``-dirty`` when it has
    uncommitted changes to tracked files: what a history row's figures were measured on."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return f"{head}-dirty" if dirty else head


def cell(text: object) -> str:
    """One table cell: a pipe or a line break would end the cell or the row."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def table_line(cells: tuple[str, ...] | list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def history_file(key: str, page: Path = DOCS) -> Path:
    """The CSV that holds every run's row of ``key``'s section of ``page``."""
    return page.parent / HISTORY / f"{key}.csv"


def read_history(path: Path) -> tuple[list[str], list[list[str]]]:
    """A history CSV's header and rows (both empty when there is no file)."""
    if not path.exists():
        return [], []
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    return (rows[0], rows[1:]) if rows else ([], [])


def append_history(path: Path, columns: tuple[str, ...], row: tuple[str, ...]) -> None:
    """Append ``row`` to the CSV at ``path``, its header first when the file is new. When a
    benchmark's columns change, the file is rewritten once under the old columns followed by the
    new ones, each old row blank in the columns it never had: no reading is lost."""
    header, rows = read_history(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if header == list(columns) or not header:
        with path.open("a", newline="") as f:
            writer = csv.writer(f, lineterminator="\n")
            if not header:
                writer.writerow(columns)
            writer.writerow(row)
        return
    union = header + [c for c in columns if c not in header]
    by_name = dict(zip(columns, row, strict=True))
    with path.open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(union)
        writer.writerows(old + [""] * (len(union) - len(old)) for old in rows)
        writer.writerow([by_name.get(c, "") for c in union])


HISTORY_PAGE = "README.md"
"""The page in the history folder that tables every CSV beside it."""
HISTORY_TOP = """# Benchmark history

Every run of every benchmark, one table per file of this folder, oldest row first. Written from
the CSVs beside it by each run, or by `python -m benchmarks.history`; edit those, not this page.
Each benchmark's latest reading is in [benchmarks.md](../benchmarks.md).

**How a reading is kept.** A benchmark's run rewrites its section of benchmarks.md
(`benchmarks/common.py::record`): the latest reading, then one line with its date and commit and
a link to its history, and appends the run's row to `KEY.csv` here, KEY being the section's
`<!-- benchmark: KEY -->` marker. A CSV has one row per run, oldest first; its columns are the
date (UTC), the commit the figures were measured on (`-dirty` when the tree had uncommitted
changes), the command, then the benchmark's own figures. Rows recorded before `benchmarks/`
became a package give the commit that recorded them, and name the scripts by their old paths
(`benchmarks/NAME.py`). A reading equal to the last row in every cell but the date (a device
run's folder recorded again, e.g. after the section's text changed) rewrites the section, keeps
its first date and adds no row. The fresh-clone timings of `make run` and `make test` are taken
by hand: append one with `.venv/bin/python -m benchmarks.history --add make-test CELL...` (the
cells after the date and commit, in the file's columns), and update the Latest table of
benchmarks.md."""


def history_table(path: Path) -> str:
    """One CSV as a markdown table under its key's heading, with a link to the file."""
    header, rows = read_history(path)
    lines = [f"## {path.stem}", "", f"[`{path.name}`]({path.name}), runs: {len(rows)}.", ""]
    if header:
        lines += [table_line([cell(c) for c in header]), table_line(["---"] * len(header))]
        lines += [table_line([cell(c) for c in row + [""] * (len(header) - len(row))]) for row in rows]
    return "\n".join(lines)


def history_page(folder: Path) -> str:
    """The index page of ``folder``: a contents line, then every CSV's table, by name."""
    files = sorted(folder.glob("*.csv"))
    contents = " · ".join(f"[{p.stem}](#{p.stem.lower()})" for p in files)
    return "\n\n".join([HISTORY_TOP, contents, *(history_table(p) for p in files)]) + "\n"


def write_history_page(folder: Path) -> Path:
    """Rewrite ``folder``'s index page from its CSVs; the page written."""
    page = folder / HISTORY_PAGE
    page.write_text(history_page(folder))
    return page


def section(reading: Reading, page: Path = DOCS) -> str:
    """The section's text: the latest reading, when and at which commit it was taken, and a link
    to every run's row (the rows themselves live in the history CSV, not on the page)."""
    if len(reading.row) != len(reading.columns):
        raise ValueError(f"{reading.key}: {len(reading.row)} cells for {len(reading.columns)} columns")
    return "\n".join([f"## {reading.title}", f"<!-- benchmark: {reading.key} -->", "", reading.latest.strip(), "",
                      recorded_line(reading.key, reading.columns, reading.row, page), f"<!-- end: {reading.key} -->"])


def recorded_line(key: str, columns: Sequence[str], row: Sequence[str], page: Path = DOCS) -> str:
    """``Recorded DATE at COMMIT; every run's row, in time order: LINK.`` for a section's latest row."""
    link = history_file(key, page).relative_to(page.parent).as_posix()
    at = dict(zip(columns, row)).get("commit")
    return f"Recorded {row[0]}{f' at {at}' if at else ''}; every run's row, in time order: [{link}]({link})."


def find_section(text: str, key: str) -> re.Match[str] | None:
    """``key``'s section of a page's ``text``, heading to end marker."""
    return re.search(rf"^## [^\n]*\n<!-- benchmark: {re.escape(key)} -->\n.*?<!-- end: {re.escape(key)} -->",
                     text, re.S | re.M)


def record(reading: Reading, path: Path = DOCS) -> None:
    """Replace ``reading.key``'s section of ``path`` with this run's, append its row to the
    section's history CSV (:func:`history_file`) and rewrite the history's page. A row equal
    to the history's last in every cell but the date is that reading recorded again (a device
    run's folder rendered anew): it keeps the date it was first recorded at and adds no row."""
    history = history_file(reading.key, path)
    header, rows = read_history(history)
    again = bool(rows) and header == list(reading.columns) and rows[-1][1:] == [str(c) for c in reading.row[1:]]
    if again:
        reading = replace(reading, row=(rows[-1][0], *reading.row[1:]))
    text = path.read_text() if path.exists() else HEAD
    new = section(reading, path)
    found = find_section(text, reading.key)
    if found:
        text = text[:found.start()] + new + text[found.end():]
    else:
        text = text.rstrip("\n") + "\n\n" + new + "\n"
    if not again:
        append_history(history, reading.columns, tuple(str(c) for c in reading.row))
    write_history_page(history.parent)
    path.write_text(text)
