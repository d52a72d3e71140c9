"""The history page (benchmarks/common.py, benchmarks/history.py): every CSV of docs/history/ as
a table, rendered from the files alone and rewritten by each record, and a reading taken by hand
appended with the date and commit."""

import pytest

from benchmarks.common import Reading, commit, history_file, history_page, read_history, record
from benchmarks.history import FOLDER, add, main


def test_every_csv_becomes_one_table_with_every_row_in_order(tmp_path):
    docs = tmp_path / "benchmarks.md"
    for day in ("monday", "tuesday"):
        record(Reading("data", "Data", "Latest.", ("date", "figure"), (day, f"{day}|1")), docs)
    record(Reading("train", "Train", "Latest.", ("date", "figure"), ("monday", "5x")), docs)
    text = (tmp_path / "history" / "README.md").read_text()  # each record rewrote it
    assert text == history_page(tmp_path / "history")
    assert text.index("## data") < text.index("## train")
    data = text.split("## data")[1].split("## train")[0]
    assert data.strip().splitlines()[-4:] == [
        "| date | figure |", "| --- | --- |", "| monday | monday\\|1 |", "| tuesday | tuesday\\|1 |"]
    assert "[`train.csv`](train.csv), runs: 1." in text


def test_the_shipped_page_is_what_the_shipped_csvs_render():
    assert (FOLDER / "README.md").read_text() == history_page(FOLDER), "run: python -m benchmarks.history"


def test_a_reading_by_hand_is_stamped_and_must_fill_the_files_columns(tmp_path):
    path = tmp_path / "make-test.csv"
    path.write_text("date,commit,command,wall time\n")
    main(["--add", "make-test", "`make test`", "9 min", "--folder", str(tmp_path)])
    header, runs = read_history(path)
    assert "| `make test` | 9 min |" in (tmp_path / "README.md").read_text()
    assert runs[-1][1:] == [commit(), "`make test`", "9 min"] and runs[-1][0].endswith("UTC")
    with pytest.raises(SystemExit, match="3 cells"):
        add("make-test", ["9 min"], tmp_path)
    assert len(read_history(path)[1]) == 1


def test_the_history_sits_beside_the_page():
    assert history_file("data") == FOLDER / "data.csv"
