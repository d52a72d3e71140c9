"""tasks/settings.py: ``.env`` read as ``KEY=VALUE`` lines, applied without overriding the shell."""

from __future__ import annotations

import os

import pytest

from tasks.settings import env_defaults, load_env_defaults


def test_env_lines_are_read_by_hand_and_the_shell_wins(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / ".env"
    path.write_text("# a comment=not a setting\nA_PODRACER_KEY = 1\n\nB_PODRACER_KEY=x=y\n  # KEY=commented\n")
    assert env_defaults(path) == {"A_PODRACER_KEY": "1", "B_PODRACER_KEY": "x=y"}
    assert env_defaults(tmp_path / "missing") == {}
    monkeypatch.setenv("A_PODRACER_KEY", "shell")
    monkeypatch.delenv("B_PODRACER_KEY", raising=False)
    load_env_defaults(path)
    assert (os.environ["A_PODRACER_KEY"], os.environ["B_PODRACER_KEY"]) == ("shell", "x=y")
    monkeypatch.delenv("B_PODRACER_KEY")
