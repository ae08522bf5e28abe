"""In CI a missing service, binary or package fails the run; only allowlisted not-applicable
skips pass (``tests/skips.py``). The cases run in a pytest subprocess (``tests/skip_cases.py``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import skips
from tests.skips import NOT_APPLICABLE, allowed, not_applicable

REPO = Path(__file__).resolve().parents[2]
CASES = "tests/skip_cases.py"


def path_without_redis_server() -> str:
    """This PATH with every directory holding a ``redis-server`` left out."""
    kept = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d]
    return os.pathsep.join(d for d in kept if shutil.which("redis-server", path=d) is None)


def run_cases(*selected: str, ci: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k != "CI"}
    env["PATH"] = path_without_redis_server()
    if ci:
        env["CI"] = "true"
    nodes = [f"{CASES}::{name}" for name in selected]
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", *nodes],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_in_ci_a_missing_redis_server_fails_the_run_and_a_skip_of_its_own_too() -> None:
    done = run_cases(
        "test_needs_a_redis_server",
        "test_skips_with_a_reason_of_its_own",
        "test_does_not_apply_by_design",
        ci=True,
    )
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, done.stdout
    assert "CI must provide redis-server" in done.stdout
    refused = done.stdout.split("skips CI does not accept")[1]
    assert "test_skips_with_a_reason_of_its_own: Skipped: the package index is slow" in refused
    assert "test_does_not_apply_by_design" not in refused
    assert "1 failed, 2 skipped" in done.stdout


def test_in_ci_an_allowlisted_not_applicable_skip_passes() -> None:
    done = run_cases("test_does_not_apply_by_design", ci=True)
    assert done.returncode == pytest.ExitCode.OK, done.stdout
    assert "1 skipped" in done.stdout


def test_outside_ci_a_missing_binary_skips_saying_what_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(skips, "IN_CI", False)
    with pytest.raises(pytest.skip.Exception, match=r"^missing: redis-server$"):
        skips.missing("redis-server")
    monkeypatch.setattr(skips, "IN_CI", True)
    with pytest.raises(pytest.fail.Exception, match="CI must provide redis-server"):
        skips.missing("redis-server")


def test_a_not_applicable_reason_must_be_on_the_allowlist() -> None:
    with pytest.raises(pytest.fail.Exception, match=r"not an allowlisted .* 'it is Tuesday'"):
        not_applicable("it is Tuesday")


def test_only_not_applicable_skips_with_an_allowlisted_reason_are_allowed() -> None:
    reason = next(iter(NOT_APPLICABLE))
    assert allowed(f"Skipped: not applicable: {reason}")
    assert not allowed(f"Skipped: {reason}")
    assert not allowed("Skipped: not applicable: it is Tuesday")
    assert not allowed("Skipped: missing: redis-server (apt-get install redis-server)")
