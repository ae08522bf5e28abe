"""Registering probes where admission runs: ``SUREHAND_PROBES`` and ``@sh.probe`` in an agents
module loaded through ``SUREHAND_AGENTS``, and what ``surehand check`` says about them.

Admission itself (not registered -> wait -> hold; a process that has the probe decides) is in
``test_admission.py``; the real worker + beat deployment is in ``test_probes_processes.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from surehand.agents.registry import AgentRegistry
from surehand.config import Settings
from surehand.errors import ConfigError
from surehand.facade import Surehand
from surehand.store import Store
from tests import probes_agents
from tests.procs import SUREHAND
from tests.recovery_helpers import Rig

REPO = Path(__file__).resolve().parents[2]
LEDGER = "tests.probes_agents:ledger"


def handle(tmp_path: Path, **values: Any) -> Surehand:
    return Surehand(settings=Settings(database_url=f"sqlite:///{tmp_path / 'db'}", **values))


# -- SUREHAND_PROBES ---------------------------------------------------------------------------


def test_surehand_probes_registers_each_named_function_in_the_handle_that_decides(
    tmp_path: Path,
) -> None:
    sh = handle(tmp_path, probes=f" ledger_by_setting={LEDGER} , other={LEDGER},")

    assert sh.registry.probe("ledger_by_setting") is probes_agents.ledger
    assert sh.registry.probe("other") is probes_agents.ledger
    assert {"ledger_by_setting", "other"} <= set(sh.registry.probe_names())
    # The admitter asks the same registry.
    assert sh.recovery.admitter.probe("ledger_by_setting") is probes_agents.ledger


def test_surehand_probes_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUREHAND_PROBES", f"ledger_by_setting={LEDGER}")
    monkeypatch.setenv("SUREHAND_PROBE_WAIT_SECONDS", "5")

    settings = Settings()

    assert settings.probes == f"ledger_by_setting={LEDGER}"
    assert settings.probe_wait_seconds == 5.0


@pytest.mark.parametrize(
    ("spec", "entry", "says"),
    [
        ("ledger", "ledger", "name=module:function"),
        (f"={LEDGER}", f"={LEDGER}", "name=module:function"),
        ("ledger=", "ledger=", "name=module:function"),
        ("ledger=tests.probes_agents", "ledger=tests.probes_agents", "module:function"),
        ("ledger=no_such_module_for_probes:f", "no_such_module_for_probes:f", "cannot be imported"),
        ("ledger=tests.probes_agents:nothing", "tests.probes_agents:nothing", "cannot be imported"),
        ("ledger=tests.probes_agents:EFFECTS_ENV", "EFFECTS_ENV", "not callable"),
        (f"a={LEDGER},a={LEDGER}", f"a={LEDGER}", "named twice"),
    ],
    ids=[
        "no-equals",
        "no-name",
        "no-target",
        "no-function",
        "no-module",
        "no-attribute",
        "not-callable",
        "duplicate",
    ],
)
def test_a_bad_surehand_probes_entry_is_a_config_error_naming_it(
    tmp_path: Path, spec: str, entry: str, says: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        AgentRegistry().load_probes(spec)
    assert entry in raised.value.message
    assert says in raised.value.message
    assert "SUREHAND_PROBES" in raised.value.message
    assert raised.value.details == {"setting": "SUREHAND_PROBES"}
    # A process fails when it loads its registry, not at the first interrupted session.
    with pytest.raises(ConfigError):
        _ = handle(tmp_path, probes=spec).registry


def test_a_bad_probe_entry_stops_a_deciding_command_at_start(tmp_path: Path) -> None:
    done = subprocess.run(
        [*SUREHAND, "reconcile", "--once"],
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(REPO),
            "SUREHAND_DATABASE_URL": f"sqlite:///{tmp_path / 'db'}",
            "SUREHAND_PROBES": "ledger=tests.probes_agents",
        },
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert "SUREHAND_PROBES entry 'ledger=tests.probes_agents'" in done.stdout + done.stderr


# -- @sh.probe in the agents module -----------------------------------------------------------


def test_sh_probe_in_an_agents_module_registers_in_the_process_that_loads_it(
    tmp_path: Path,
) -> None:
    """The module's ``sh`` is its own handle, not the worker's: its probes still count."""
    worker = handle(tmp_path, agents="DEV=tests.probes_agents:charge")

    assert worker.registry.get("DEV").handler is probes_agents.charge
    assert worker.registry.probe("ledger_by_decorator") is probes_agents.ledger_by_decorator
    # A process that does not load the module does not get its probes.
    assert handle(tmp_path).registry.probe("ledger_by_decorator") is None


def test_an_agents_module_that_builds_its_handle_from_the_environment_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Surehand.from_env()`` in the module sees the same SUREHAND_AGENTS that names the
    module; ``@sh.probe`` there must not import the module again while it is half-imported."""
    module = "probe_agents_from_env_module"
    (tmp_path / f"{module}.py").write_text(
        textwrap.dedent(
            """
            from surehand import Surehand

            sh = Surehand.from_env()

            @sh.probe("gateway")
            def gateway(operation):
                return True

            def dev(ctx):
                return "done"
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("SUREHAND_AGENTS", f"DEV={module}:dev")
    monkeypatch.setenv("SUREHAND_DATABASE_URL", f"sqlite:///{tmp_path / 'db'}")

    worker = Surehand.from_env().registry

    loaded = sys.modules[module]
    assert worker.get("DEV").handler is loaded.dev
    assert worker.probe("gateway") is loaded.gateway
    assert loaded.sh.registry.probe("gateway") is loaded.gateway


def test_a_handles_own_probe_counts_before_and_after_its_registry_is_built(
    tmp_path: Path,
) -> None:
    sh = handle(tmp_path)
    sh.probe("early")(probes_agents.ledger)
    assert sh.registry.probe("early") is probes_agents.ledger
    sh.probe("late")(probes_agents.ledger)
    assert sh.registry.probe("late") is probes_agents.ledger


# -- surehand check ---------------------------------------------------------------------------


def check(store: Store, tmp_path: Path, **env: str) -> dict[str, dict[str, str]]:
    done = subprocess.run(
        [*SUREHAND, "check", "--json"],
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(REPO),
            "SUREHAND_DATABASE_URL": store.url,
            **env,
        },
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    report = json.loads(done.stdout)
    return {item["name"]: item for item in report["checks"]}


def test_check_lists_registered_probes_and_those_open_intents_name_but_lack(
    rig: Rig, tmp_path: Path
) -> None:
    for probe in ("gateway", "gateway", "ledger_by_setting", "mailer"):
        rig.intent(rig.claim(rig.new_task()), "charge", probe=probe)
    settled = rig.claim(rig.new_task())
    rig.outcome(settled, rig.intent(settled, "charge", probe="settled_only"))

    found = check(
        rig.store,
        tmp_path,
        SUREHAND_PROBES=f"ledger_by_setting={LEDGER}",
        SUREHAND_AGENTS="DEV=tests.probes_agents:charge",
    )

    assert found["probes"]["status"] == "ok"
    assert found["probes"]["detail"] == (
        "built-in: git.push@1, github.pull_request@1, http.request@1; "
        "registered: ledger_by_decorator, ledger_by_setting"
    )
    missing = found["probes-not-registered"]
    assert missing["status"] == "warn"
    assert "'gateway' (2 open intents" in missing["detail"]
    assert "'mailer' (1 open intent" in missing["detail"]
    assert "ledger_by_setting" not in missing["detail"]
    assert "settled_only" not in missing["detail"]
    assert "SUREHAND_PROBES" in missing["fix"]


def test_check_says_when_only_built_in_probes_are_registered_but_open_intents_name_another(
    rig: Rig, tmp_path: Path
) -> None:
    task_id = rig.new_task()
    rig.intent(rig.claim(task_id), "charge", probe="gateway")

    found = check(rig.store, tmp_path)

    assert found["probes"]["status"] == "ok"
    assert found["probes"]["detail"].endswith("; registered: none")
    assert task_id in found["probes-not-registered"]["detail"]


def test_check_lists_the_built_in_probes_without_any_setting(rig: Rig, tmp_path: Path) -> None:
    assert check(rig.store, tmp_path)["probes"]["detail"] == (
        "built-in: git.push@1, github.pull_request@1, http.request@1; registered: none"
    )
