"""The built-in probes are in every handle's registry without a setting; an operator's probe
of the same name takes the built-in one's place."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from surehand.agents.probes.git_push import GitPushProbe
from surehand.config import Settings
from surehand.facade import Surehand
from tests import probes_agents


def handle(tmp_path: Path, **values: Any) -> Surehand:
    return Surehand(settings=Settings(database_url=f"sqlite:///{tmp_path / 'db'}", **values))


def test_every_handle_has_the_built_in_probes_with_their_versions(tmp_path: Path) -> None:
    with handle(tmp_path) as sh:
        assert isinstance(sh.registry.probe("git.push"), GitPushProbe)
        assert sh.recovery.admitter.probe("http.request") is not None
        assert sh.registry.probe_labels() == [
            "git.push@1",
            "github.pull_request@1",
            "http.request@1",
        ]


def test_an_operators_probe_of_a_built_in_name_replaces_it(tmp_path: Path) -> None:
    with handle(tmp_path, probes="git.push=tests.probes_agents:ledger") as sh:
        assert sh.registry.probe("git.push") is probes_agents.ledger
        assert "git.push" in sh.registry.probe_labels()  # no version: not the built-in one
        assert "git.push@1" not in sh.registry.probe_labels()
