"""Hints name the ``surehand`` the user can run from where they are, not one PATH lacks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from surehand.cli.common import invoked_as


def test_a_surehand_run_from_a_venv_in_this_directory_is_named_by_its_relative_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / ".venv" / "bin" / "surehand"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setattr(sys, "argv", [".venv/bin/surehand", "up"])
    assert invoked_as() == ".venv/bin/surehand"


def test_a_surehand_found_on_path_is_named_plainly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "bin" / "surehand"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(script.parent))
    monkeypatch.setattr(sys, "argv", [str(script), "up"])
    assert invoked_as() == "surehand"


def test_python_dash_m_surehand_is_named_with_its_interpreter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "argv", ["/x/surehand/__main__.py", "up"])
    assert invoked_as() == f"{sys.executable} -m surehand"
