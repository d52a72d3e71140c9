"""A benchmark's section of docs/benchmarks.md and its history CSV (benchmarks/common.py): a run
replaces its own section with its latest reading and when it was taken, appends exactly one row to
docs/history/KEY.csv, and leaves the other sections as they were; and the commit a row is
stamped with."""

import csv
import re
import subprocess

import pytest

from benchmarks.common import (
    ARCHIVE,
    DOCS,
    ROOT,
    Reading,
    commit,
    history_file,
    market_params,
    read_history,
    record,
    recorded_line,
    seeds_of,
)


def reading(key: str, latest: str, row: tuple[str, ...]) -> Reading:
    return Reading(key, f"The {key} benchmark", latest, ("date", "figure"), row)


def rows(path) -> list[list[str]]:
    with path.open(newline="") as f:
        return list(csv.reader(f))


def test_a_new_section_is_appended_and_a_rerun_replaces_its_latest_reading_and_adds_a_row(tmp_path):
    docs = tmp_path / "benchmarks.md"
    docs.write_text("# Benchmarks\n\nintro\n")
    record(reading("data", "Latest: monday.\n\n| a |\n|---|\n| 1 |", ("monday", "1.0 s")), docs)
    record(reading("train", "Latest: monday.", ("monday", "5x")), docs)
    train_before = docs.read_text().split("## The train benchmark")[1]
    record(reading("data", "Latest: tuesday.\n\n| a |\n|---|\n| 2 |", ("tuesday", "0.9 s")), docs)
    text = docs.read_text()
    assert text.startswith("# Benchmarks\n\nintro\n")
    assert text.count("## The data benchmark") == 1 and "Latest: monday.\n\n| a |" not in text
    data = text.split("<!-- benchmark: data -->")[1].split("<!-- end: data -->")[0]
    assert data.strip().splitlines()[0] == "Latest: tuesday."
    assert "[history/data.csv](history/data.csv)" in data  # the page links every run's rows
    assert data.strip().splitlines()[-1] == (  # when the reading was taken; its rows live in the CSV
        "Recorded tuesday; every run's row, in time order: [history/data.csv](history/data.csv).")
    assert "monday" not in data and "0.9 s" not in data  # the page keeps the latest reading only
    assert text.index("## The data benchmark") < text.index("## The train benchmark")  # stays in place
    assert text.split("## The train benchmark")[1] == train_before  # another section is left as it was
    assert rows(tmp_path / "history" / "data.csv") == [["date", "figure"], ["monday", "1.0 s"], ["tuesday", "0.9 s"]]
    assert rows(tmp_path / "history" / "train.csv") == [["date", "figure"], ["monday", "5x"]]


def test_a_record_appends_exactly_one_row_and_keeps_the_rows_before_it(tmp_path):
    docs = tmp_path / "benchmarks.md"
    history = history_file("ceiling", docs)
    history.parent.mkdir()
    history.write_text('date,figure\nmonday,"-s a|b, c"\n')  # a row recorded before, a comma and a pipe in it
    record(reading("ceiling", "Latest.", ("tuesday", "2")), docs)
    assert history.read_text() == 'date,figure\nmonday,"-s a|b, c"\ntuesday,2\n'


def test_the_same_reading_recorded_again_keeps_its_date_and_adds_no_row(tmp_path):
    docs = tmp_path / "benchmarks.md"
    record(reading("gpu", "Run on the device.", ("monday", "126 M")), docs)
    record(reading("gpu", "Run on the device, rendered anew.", ("thursday", "126 M")), docs)
    assert rows(history_file("gpu", docs)) == [["date", "figure"], ["monday", "126 M"]]
    assert "rendered anew" in docs.read_text() and "Recorded monday" in docs.read_text()
    record(reading("gpu", "A new run.", ("friday", "130 M")), docs)
    assert rows(history_file("gpu", docs))[1:] == [["monday", "126 M"], ["friday", "130 M"]]


def test_a_changed_header_keeps_every_old_row_under_its_own_columns(tmp_path):
    docs = tmp_path / "benchmarks.md"
    record(reading("paper", "Latest.", ("monday", "1")), docs)
    record(Reading("paper", "The paper benchmark", "Latest.", ("date", "figure", "new"), ("tuesday", "2", "3")), docs)
    assert read_history(history_file("paper", docs)) == (
        ["date", "figure", "new"], [["monday", "1", ""], ["tuesday", "2", "3"]])


def test_a_cell_cannot_break_its_row_and_a_short_row_is_refused(tmp_path):
    docs = tmp_path / "benchmarks.md"
    record(reading("ceiling", "Latest.", ("monday", "-s a|b\nc")), docs)
    assert "| monday | -s a\\|b c |" in (tmp_path / "history" / "README.md").read_text()  # the rows' page
    assert rows(tmp_path / "history" / "ceiling.csv")[1] == ["monday", "-s a|b\nc"]  # the data file keeps it whole
    with pytest.raises(ValueError, match="1 cells for 2 columns"):
        record(reading("ceiling", "Latest.", ("monday",)), docs)
    assert len(rows(tmp_path / "history" / "ceiling.csv")) == 2  # a refused row is not written


def test_a_key_that_is_a_prefix_of_another_finds_its_own_section(tmp_path):
    docs = tmp_path / "benchmarks.md"
    record(reading("broker_cycle", "Latest: cycle.", ("monday", "1")), docs)
    record(reading("broker", "Latest: broker.", ("monday", "2")), docs)
    record(reading("broker", "Latest: broker again.", ("tuesday", "3")), docs)
    text = docs.read_text()
    assert "Recorded monday;" in text.split("<!-- end: broker_cycle -->")[0].split("<!-- benchmark: broker_cycle")[1]
    assert text.count("<!-- benchmark: broker -->") == 1 and "Latest: broker.\n" not in text
    history = tmp_path / "history"
    assert len(rows(history / "broker_cycle.csv")) == 2 and len(rows(history / "broker.csv")) == 3


SCRIPTS = {"data": "perf/data.py", "train": "perf/train.py", "nitro": "archive/nitro.py",
           "population": "perf/population.py", "broker": "perf/broker.py", "cycle": "perf/cycle.py",
           "ceiling": "archive/ceiling.py", "selection": "archive/selection.py", "paper": "perf/paper.py",
           "train_freq": "archive/train_freq.py", "gpu": "perf/gpu_report.py", "wrds": "perf/wrds.py",
           "heal": "perf/heal.py", "gate-stats": "perf/gate_stats.py", "update-bytes": "perf/gpu_update.py"}


@pytest.mark.parametrize("key", sorted(SCRIPTS))
def test_every_benchmark_writes_a_section_that_the_docs_hold(key):
    """Each script's key names one section of docs/benchmarks.md (docs/benchmarks-archive.md for the
    finished studies of benchmarks/archive/), so a run replaces it rather than appending a second
    one, and one history CSV whose header is the section's row's."""
    source = (DOCS.parents[1] / "benchmarks" / SCRIPTS[key]).read_text()
    literal = re.search(rf'Reading\(\s*"{key}"', source)
    named = re.search(rf'key, title = \(\("{key}",', source)  # cycle.py: its key is "cycle" for params.yaml
    assert literal or named, f"benchmarks/{SCRIPTS[key]} records no '{key}' section"
    page = ARCHIVE if SCRIPTS[key].startswith("archive/") else DOCS
    assert 'record(Reading(' in source and (page == DOCS) == ("ARCHIVE" not in source)
    text = page.read_text()
    assert (ARCHIVE if page == DOCS else DOCS).read_text().count(f"<!-- benchmark: {key} -->") == 0
    assert text.count(f"<!-- benchmark: {key} -->") == 1 and text.count(f"<!-- end: {key} -->") == 1
    section = text.split(f"<!-- benchmark: {key} -->")[1].split(f"<!-- end: {key} -->")[0]
    assert section.count("\n## ") == 0 and f"[history/{key}.csv](history/{key}.csv)" in section
    header, runs = read_history(history_file(key, page))
    assert header[:2] == ["date", "commit"] and runs  # each row's commit
    assert section.rstrip().splitlines()[-1] == recorded_line(key, header, runs[-1], page)  # its latest row's date


@pytest.mark.parametrize("key", ["make-run", "make-test"])
def test_the_two_commands_readings_by_hand_are_kept_in_their_own_csv(key):
    header, runs = read_history(history_file(key))
    assert header == ["date", "commit", "command", "wall time", "of which", "result"]
    assert runs and all(len(run) == len(header) for run in runs)
    assert f"[history/{key}.csv](history/{key}.csv)" in DOCS.read_text()


def test_a_row_is_stamped_with_the_commit_it_was_measured_on():
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.strip()
    assert commit() == (f"{head}-dirty" if dirty else head)


def test_seed_lists_read_ranges_lists_and_one_seed():
    assert seeds_of("7-9") == [7, 8, 9] and seeds_of("7,9") == [7, 9] and seeds_of("400") == [400]


def test_each_market_kind_reads_its_own_params_file_at_its_seed(tmp_path):
    minute = market_params(tmp_path, "minute", 103, ["ppo.anchor=2"])
    daily = market_params(tmp_path, "learnable", 103, [])
    assert (minute.data.freq, minute.data.symbols, minute.registry.model_name) == ("1min", 10, "podracer-ppo-1min")
    assert (daily.data.freq, daily.registry.model_name) == ("1d", "podracer-ppo")
    assert minute.data.seed == minute.evolution.seed == 103 and minute.ppo.anchor == 2
    assert str(minute.data_dir).startswith(str(tmp_path / "minute-103"))
