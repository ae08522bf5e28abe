"""The deployment files without Docker: the compose file parses, every surehand service runs a
real ``surehand`` command with real options, every ``SUREHAND_*`` variable is a setting or a
CLI variable, healthchecks and ordering are in place, and the guide covers operations."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import typer.main
import yaml

from surehand.cli import app
from surehand.config import Settings

COMPOSE = Path(__file__).resolve().parents[2] / "compose"
EXPECTED = {"postgres", "redis", "migrate", "api", "worker-dev", "worker-ops", "beat", "flower"}


@pytest.fixture(scope="module")
def compose_services() -> dict[str, dict[str, Any]]:
    data = yaml.safe_load((COMPOSE / "docker-compose.yml").read_text(encoding="utf-8"))
    found: dict[str, dict[str, Any]] = data["services"]
    return found


def surehand_services(compose_services: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    return {
        name: spec["command"]
        for name, spec in compose_services.items()
        if "command" in spec and spec["command"][0] == "surehand"
    }


def resolve(args: list[str]) -> tuple[Any, list[str]]:
    """The typer/click command an argv names, and the rest of the argv."""
    command: Any = typer.main.get_command(app)
    rest = list(args)
    while rest and hasattr(command, "commands") and rest[0] in command.commands:
        command = command.commands[rest.pop(0)]
    assert not hasattr(command, "commands"), f"{args} names a group, not a command"
    return command, rest


def cli_env_vars() -> set[str]:
    found: set[str] = set()

    def walk(command: Any) -> None:
        for param in getattr(command, "params", []):
            envvar = getattr(param, "envvar", None)
            found.update([envvar] if isinstance(envvar, str) else envvar or [])
        for child in getattr(command, "commands", {}).values():
            walk(child)

    walk(typer.main.get_command(app))
    return found


def test_all_services_present(compose_services: dict[str, dict[str, Any]]) -> None:
    assert set(compose_services) == EXPECTED


def test_every_service_command_is_a_real_surehand_command(
    compose_services: dict[str, dict[str, Any]],
) -> None:
    commands = surehand_services(compose_services)
    assert set(commands) == EXPECTED - {"postgres", "redis"}
    for name, argv in commands.items():
        command, rest = resolve(argv[1:])
        known = {opt for param in command.params for opt in getattr(param, "opts", [])}
        flags = [token for token in rest if token.startswith("--")]
        assert set(flags) <= known, f"{name}: unknown options {set(flags) - known}"
        for param in command.params:  # required options are given
            if getattr(param, "required", False) and param.param_type_name == "option":
                assert set(param.opts) & set(flags), f"{name}: missing {param.opts[0]}"


def test_every_surehand_variable_is_known(compose_services: dict[str, dict[str, Any]]) -> None:
    settings = {f"SUREHAND_{name.upper()}" for name in Settings.model_fields}
    known = settings | cli_env_vars()
    text = (COMPOSE / "docker-compose.yml").read_text(encoding="utf-8")
    used = set(re.findall(r"\bSUREHAND_[A-Z0-9_]+", text))
    for spec in compose_services.values():
        used |= {key for key in spec.get("environment", {}) if key.startswith("SUREHAND_")}
    assert used - known == set()
    assert {"SUREHAND_DATABASE_URL", "SUREHAND_BROKER_URL", "SUREHAND_REDIS_URL"} <= used


def test_ordering_healthchecks_and_exposure(compose_services: dict[str, dict[str, Any]]) -> None:
    commands = surehand_services(compose_services)
    assert [name for name, argv in commands.items() if argv[1:2] == ["beat"]] == ["beat"]
    assert commands["migrate"] == ["surehand", "db", "upgrade"]
    for name in ("api", "worker-dev", "worker-ops", "beat", "flower"):
        depends = compose_services[name]["depends_on"]
        assert depends["migrate"]["condition"] == "service_completed_successfully", name
    for name in EXPECTED - {"migrate"}:
        assert "healthcheck" in compose_services[name], name
    roles = {commands[w][commands[w].index("--roles") + 1] for w in ("worker-dev", "worker-ops")}
    assert roles == {"DEV", "QA,OPS"}
    assert "SUREHAND_API_TOKENS" in compose_services["api"]["environment"]
    for name in ("api", "flower"):
        assert all(port.startswith("127.0.0.1:") for port in compose_services[name]["ports"]), name


def test_dockerfile_and_guide() -> None:
    dockerfile = (COMPOSE / "Dockerfile").read_text(encoding="utf-8")
    # The official image by default; a build argument for a locally built one (issue 23).
    assert "ARG BASE_IMAGE=python:3.11-slim\nFROM ${BASE_IMAGE}" in dockerfile
    assert 'pip install ".[all]"' in dockerfile
    assert "USER surehand" in dockerfile
    guide = (COMPOSE / "DEPLOYMENT.md").read_text(encoding="utf-8")
    for topic in ("Scaling workers by role", "Exactly one beat", "Backups", "Upgrading"):
        assert f"## {topic}" in guide
    for needle in ("pg_dump", "surehand db upgrade", "surehand check", "--roles"):
        assert needle in guide


def test_the_podman_override_uses_the_images_compose_images_build_makes() -> None:
    override = yaml.safe_load((COMPOSE / "docker-compose.podman.yml").read_text(encoding="utf-8"))
    build = (COMPOSE / "images" / "build").read_text(encoding="utf-8")
    for name in ("postgres", "redis"):
        assert f"build {override['services'][name]['image']} " in build


def test_every_health_check_has_a_start_period_so_starting_is_not_broken(
    compose_services: dict[str, dict[str, Any]],
) -> None:
    checked = {
        n: spec["healthcheck"] for n, spec in compose_services.items() if "healthcheck" in spec
    }
    assert set(checked) == EXPECTED - {"migrate"}
    assert all("start_period" in check for check in checked.values())


def test_a_workers_health_check_pings_the_node_name_the_worker_takes(
    compose_services: dict[str, dict[str, Any]],
) -> None:
    # `surehand worker` names its node surehand-<ROLES>@<host> (default_nodename in the CLI).
    for name, roles in (("worker-dev", "DEV"), ("worker-ops", "QA-OPS")):
        test = compose_services[name]["healthcheck"]["test"][1]
        assert f"inspect ping -d surehand-{roles}@$$(hostname)" in test


def test_docker_users_get_the_official_images_and_the_override_replaces_only_images(
    compose_services: dict[str, dict[str, Any]],
) -> None:
    """Docker cannot run here (no registry): the Docker path with the official images is held
    by the files themselves. The default file names the official images and base image; the
    podman override changes nothing but the ``image`` of the two stand-ins."""
    assert compose_services["postgres"]["image"] == "postgres:16"
    assert compose_services["redis"]["image"] == "redis:7"
    surehand = {n: s for n, s in compose_services.items() if n not in {"postgres", "redis"}}
    for name, spec in surehand.items():
        assert spec["build"]["args"]["BASE_IMAGE"] == "${BASE_IMAGE:-python:3.11-slim}", name
        assert spec["build"]["dockerfile"] == "compose/Dockerfile", name
    override = yaml.safe_load((COMPOSE / "docker-compose.podman.yml").read_text(encoding="utf-8"))
    assert set(override) == {"services"}
    assert {name: set(spec) for name, spec in override["services"].items()} == {
        "postgres": {"image"},
        "redis": {"image"},
    }
    assert all(spec["image"].startswith("localhost/") for spec in override["services"].values())


def podman_compose() -> str | None:
    """podman-compose on PATH, or the one compose/check installs in its image cache."""
    cache = Path(os.environ.get("SUREHAND_IMAGE_CACHE", "/var/cache/surehand-images"))
    cached = cache / "tools" / "bin" / "podman-compose"
    found = shutil.which("podman-compose") or (str(cached) if cached.exists() else None)
    return found if found and shutil.which("podman") else None


def config_check() -> ModuleType:
    """compose/check.d/config.py, the comparison compose/check runs first."""
    spec = importlib.util.spec_from_file_location("compose_config", COMPOSE / "check.d/config.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


needs_podman_compose = pytest.mark.skipif(
    podman_compose() is None, reason="podman-compose (and podman) not installed"
)


@needs_podman_compose
def test_podman_compose_config_resolves_the_default_file_and_the_podman_pair() -> None:
    shown = config_check().both_file_sets_resolve(podman_compose())
    assert "only the stand-ins' images differ" in shown


@needs_podman_compose
def test_the_config_check_fails_when_the_override_changes_more_than_images(
    tmp_path: Path,
) -> None:
    override = tmp_path / "override.yml"
    override.write_text(
        (COMPOSE / "docker-compose.podman.yml").read_text(encoding="utf-8")
        + "  api:\n    command: [surehand, api, --port, '9000']\n",
        encoding="utf-8",
    )
    with pytest.raises(AssertionError, match="changes api's \\['command'\\]"):
        config_check().both_file_sets_resolve(podman_compose(), override)


# -- issue 29 item 2: the deployment's own doors need credentials; agents run sandboxed ----

COMPOSE_TEXT = (COMPOSE / "docker-compose.yml").read_text(encoding="utf-8")
REQUIRED = "${{{name}:?"  # compose's "required, with this message" form
WORKERS = ("worker-dev", "worker-ops")


def test_no_password_has_a_default() -> None:
    """Every password the compose file names is required (``${X:?...}``): none falls back to
    a default anyone can read here (it was ``${POSTGRES_PASSWORD:-surehand}``)."""
    uses = re.findall(r"\$\{(\w*PASSWORD\w*)(:?[-?+]?)", COMPOSE_TEXT)
    assert {name for name, _ in uses} == {"POSTGRES_PASSWORD", "REDIS_PASSWORD"}
    assert {form for _, form in uses} == {":?"}, uses


def test_postgres_requires_its_password_and_the_url_carries_it(
    compose_services: dict[str, dict[str, Any]],
) -> None:
    password = compose_services["postgres"]["environment"]["POSTGRES_PASSWORD"]
    assert password.startswith(REQUIRED.format(name="POSTGRES_PASSWORD"))
    for name, spec in compose_services.items():
        if name in {"postgres", "redis"}:
            continue
        url = spec["environment"]["SUREHAND_DATABASE_URL"]
        userinfo = url.split("://", 1)[1].rsplit("@", 1)[0]
        assert userinfo.startswith("surehand:" + REQUIRED.format(name="POSTGRES_PASSWORD")), name


def test_redis_requires_a_password_for_the_broker_and_the_leases(
    compose_services: dict[str, dict[str, Any]],
) -> None:
    redis = compose_services["redis"]
    command = redis["command"]
    assert command[command.index("--requirepass") + 1].startswith(
        REQUIRED.format(name="REDIS_PASSWORD")
    )
    # redis-cli exits 0 on NOAUTH: the health check authenticates and passes only on PONG.
    assert redis["environment"]["REDISCLI_AUTH"].startswith(REQUIRED.format(name="REDIS_PASSWORD"))
    assert redis["healthcheck"]["test"] == ["CMD-SHELL", "redis-cli ping | grep -qx PONG"]
    for name, spec in compose_services.items():
        if name in {"postgres", "redis"}:
            continue
        for variable in ("SUREHAND_BROKER_URL", "SUREHAND_REDIS_URL"):
            url = spec["environment"][variable]
            assert url.startswith("redis://:" + REQUIRED.format(name="REDIS_PASSWORD")), name


def test_the_guide_and_the_deployment_page_set_both_passwords_in_the_quick_start() -> None:
    guide = (COMPOSE / "DEPLOYMENT.md").read_text(encoding="utf-8")
    docs = COMPOSE.parent / "docs"
    page = (docs / "deployment" / "index.md").read_text(encoding="utf-8")
    deployment = page.split("# Running the deployment (Docker, podman)", 1)[1]
    for text in (guide, deployment):
        quick_start = text.split("```bash", 1)[1].split("```", 1)[0]
        for name in ("POSTGRES_PASSWORD", "REDIS_PASSWORD"):
            assert f"export {name}=" in quick_start
    for path in (COMPOSE.parent / "README.md", *docs.rglob("*.md")):
        assert "compose/ sets both" not in path.read_text(encoding="utf-8")  # it did not


def test_the_worker_image_installs_bubblewrap() -> None:
    dockerfile = (COMPOSE / "Dockerfile").read_text(encoding="utf-8")
    install = re.search(r"apt-get install -y --no-install-recommends bubblewrap", dockerfile)
    assert install is not None
    assert install.start() < dockerfile.index("USER surehand")  # as root, before the drop


def sandbox_options() -> tuple[str, ...]:
    """compose/check's copy of the workers' options (check.d/sandboxed.py), as podman flags."""
    sys.path.insert(0, str(COMPOSE / "check.d"))
    try:
        module = importlib.import_module("sandboxed")
    finally:
        sys.path.remove(str(COMPOSE / "check.d"))
    found: tuple[str, ...] = module.COMPOSE_OPTIONS
    return found


def test_the_workers_get_what_bwrap_needs_and_nothing_else_does(
    compose_services: dict[str, dict[str, Any]],
) -> None:
    """The workers (only they run agents) carry the engine options bubblewrap needs in a
    container, never run agents unconfined (SUREHAND_AGENT_SANDBOX=bwrap by default), and are
    what compose/check runs under podman."""
    for name in WORKERS:
        spec = compose_services[name]
        resolved = [
            opt.replace("${WORKER_SECCOMP:-unconfined}", "unconfined")
            for opt in spec["security_opt"]
        ]
        flags = {f"--security-opt={opt}" for opt in resolved} | {
            f"--cap-drop={cap}" for cap in spec["cap_drop"]
        }
        assert flags == set(sandbox_options()), name
        assert "no-new-privileges:true" in resolved
        assert spec["cap_drop"] == ["ALL"]
        assert spec["environment"]["SUREHAND_AGENT_SANDBOX"] == "${SUREHAND_AGENT_SANDBOX:-bwrap}"
        assert spec.get("user") is None  # the image's unprivileged user (uid 10001)
    for name, spec in compose_services.items():
        if name not in WORKERS:
            assert "security_opt" not in spec, name
        assert "cap_add" not in spec, name


def test_the_guide_says_what_each_sandbox_option_grants() -> None:
    guide = (COMPOSE / "DEPLOYMENT.md").read_text(encoding="utf-8")
    section = guide.split("## Agent sandboxes in the worker containers", 1)[1].split("\n## ", 1)[0]
    for option in (
        "seccomp=unconfined",
        "WORKER_SECCOMP",
        "apparmor=unconfined",
        "systempaths=unconfined",
        "no-new-privileges:true",
        "cap_drop",
        "unmask=/proc/*",
        "SUREHAND_AGENT_SANDBOX",
    ):
        assert option in section, option


@needs_podman_compose
def test_the_default_file_does_not_resolve_without_either_password() -> None:
    shown = config_check().passwords_required(podman_compose())
    assert "does not resolve" in shown


def test_the_workers_start_lines_reach_a_log_shipper_one_line_each(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A worker with a command agent says how its programs run in seven lines on stderr, each
    whole however long (compose/check found 'agent programs: sandbox bwrap: ...' cut in two
    at 80 columns in a container's log, the second half a line of its own)."""
    from surehand.cli.session_commands import announce_confinement
    from surehand.facade import Surehand

    names = [f"CHECK_LONG_VARIABLE_NAME_{n}" for n in range(12)]  # a long environment line
    monkeypatch.setenv("SUREHAND_AGENTS", "QA=command")
    monkeypatch.setenv("SUREHAND_COMMAND_AGENT", "true")
    monkeypatch.setenv("SUREHAND_AGENT_SANDBOX", "none")
    monkeypatch.setenv("SUREHAND_AGENT_ENV", ",".join(names))
    for name in names:
        monkeypatch.setenv(name, "x")
    with Surehand(database_url=f"sqlite:///{tmp_path}/store.sqlite3") as sh:
        announce_confinement(sh, ["QA"])
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" ", 3)[:3] for line in lines] == [
        ["agent", "programs:", "sandbox"],
        ["agent", "programs:", "view"],
        ["agent", "programs:", "network"],
        ["agent", "programs:", "limits"],
        ["agent", "programs:", "disk"],
        ["agent", "programs:", "user"],
        ["agent", "programs:", "environment"],
    ]
    assert all(name in lines[-1] for name in names)


def test_beats_health_check_does_not_judge_a_sandbox_it_never_uses(
    compose_services: dict[str, dict[str, Any]],
) -> None:
    """Beat runs no agent and has no sandbox options: its health check (`surehand check`)
    with a command agent configured would fail on bwrap in its container (net's `auto`
    refuses to fall back), so it leaves the sandbox out, explicitly."""
    assert compose_services["beat"]["healthcheck"]["test"] == [
        "CMD-SHELL",
        "SUREHAND_AGENT_SANDBOX=none surehand check",
    ]
    assert "SUREHAND_AGENT_SANDBOX" not in compose_services["beat"].get("environment", {})
