"""The client's journal: one record per (account, bar, model version), planned then recorded."""

from __future__ import annotations

import sqlite3

import pytest

from tasks.delivery.client.journal import Journal


def test_a_cycle_is_one_record_whose_state_moves_and_other_accounts_never_see_it(tmp_path):
    path = tmp_path / "journal.db"
    mine, other = Journal(path, "account-1"), Journal(path, "account-2")
    mine.put({"bar": "2023-07-05", "model_version": "3", "state": "planned", "body": {"planned": [1, 2]}})
    [planned] = mine.cycles("2023-07-05")
    assert (planned["state"], planned["body"], planned["recorded_at"]) == ("planned", {"planned": [1, 2]}, None)

    mine.put({"bar": "2023-07-05", "model_version": "3", "state": "recorded", "body": {"orders": []}})
    mine.put({"bar": "2023-07-03", "model_version": "3", "state": "halted", "body": {}})
    [recorded] = Journal(path, "account-1").cycles("2023-07-05")  # a new process reads the same file
    assert (recorded["state"], recorded["body"]) == ("recorded", {"orders": []})
    assert recorded["started_at"] == planned["started_at"] and recorded["recorded_at"] is not None
    assert [(r["bar"], r["state"]) for r in mine.cycles()] == [("2023-07-03", "halted"), ("2023-07-05", "recorded")]

    assert other.cycles() == [] and other.cycles("2023-07-05") == []  # a new paper account starts with none
    other.put({"bar": "2023-07-05", "model_version": "3", "state": "planned", "body": {}})
    assert [r["state"] for r in mine.cycles("2023-07-05")] == ["recorded"]


def test_an_unknown_state_is_refused(tmp_path):
    with pytest.raises(sqlite3.IntegrityError):
        Journal(tmp_path / "journal.db", "a").put({"bar": "2023-07-05", "model_version": "1", "state": "odd",
                                                   "body": {}})
