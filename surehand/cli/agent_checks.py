"""The agent checks of ``surehand check``: each served role's agent and the probes it
registers, how command agents' programs run here (sandbox, network, preset), the retry and
budget settings, and the probes open intents name that this process lacks.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from surehand.cli.checks import Check, is_deployment
from surehand.errors import ConfigError, SurehandError

if TYPE_CHECKING:
    from surehand.config import Settings


AGENT_FIX = (
    "set SUREHAND_AGENTS: ROLE=demo (built-in demo), ROLE=command with "
    "SUREHAND_COMMAND_AGENT, or ROLE=package.module:function; e.g. DEV=demo,QA=command"
)


def check_agents(settings: Settings, roles: list[str]) -> list[Check]:
    """The agent of each served role (SUREHAND_ROLES, else every role in SUREHAND_AGENTS) with
    the probes its module registers. A deployment has no default agent: none is a failure."""
    specs = _agent_specs(settings.agents)
    if not specs and not roles and not is_deployment(settings):
        return [
            Check(
                "agents",
                "ok",
                "none configured: `surehand up` runs the demo agent for DEV, QA and OPS",
                "set SUREHAND_AGENTS to run your own handlers",
            )
        ]
    if not specs and not roles:
        detail = "SUREHAND_AGENTS is empty: workers refuse to start (no default agent)"
        return [Check("agents", "fail", detail, AGENT_FIX)]
    return [_agent_check(settings, role, specs.get(role)) for role in roles or list(specs)]


def _agent_specs(agents: str) -> dict[str, str]:
    """SUREHAND_AGENTS as role -> target (``demo``, ``command`` or ``module:function``)."""
    pairs = (item.partition("=") for item in agents.split(",") if item.strip())
    return {role.strip(): target.strip() for role, _, target in pairs}


def _agent_check(settings: Settings, role: str, target: str | None) -> Check:
    name = f"agent {role}"
    if target is None:
        return Check(name, "fail", "no agent for this role: its worker refuses to start", AGENT_FIX)
    from surehand.agents.builtin import register_builtin_agents  # only `check` needs them
    from surehand.agents.registry import AgentRegistry
    from surehand.runtime import session_door

    registry = AgentRegistry()
    register_builtin_agents(registry, settings, session_door())
    try:
        registry.load(f"{role}={target}")
    except SurehandError as error:
        return Check(name, "fail", error.message, "fix SUREHAND_AGENTS")
    probes = ", ".join(registry.probe_names()) or "none"
    return Check(name, "ok", f"{_describe_agent(settings, target)}; probes: {probes}")


def _describe_agent(settings: Settings, target: str) -> str:
    if target == "demo":
        return "demo (built-in demo agent)"
    if target == "command":
        return f"command: {settings.command_agent} (SUREHAND_COMMAND_AGENT)"
    return target


def check_agent_programs(settings: Settings) -> list[Check]:
    """With a command agent configured: how its programs run here (sandbox, limits, user) and
    the environment variable names they receive from the worker."""
    if "command" not in _agent_specs(settings.agents).values():
        return []
    from surehand.agents.launch import Confinement  # only command agents need it

    try:
        confinement = Confinement.from_settings(settings)
    except SurehandError as error:
        return [Check("agent programs", "fail", error.message, "fix the setting it names")]
    found = {
        line.split(" ", 1)[0]: Check(f"agent {line.split(' ', 1)[0]}", "ok", line.split(" ", 1)[1])
        for line in confinement.describe()
    }
    if confinement.sandbox.mode != "bwrap":
        found["sandbox"] = _warn(
            found["sandbox"],
            "install bubblewrap (apt-get install bubblewrap): without it an agent sees the "
            "host's processes, files and network as the worker's user does "
            "(docs/agents/sandbox.md: What an agent can reach)",
        )
    if confinement.net.shares_host:
        found["network"] = _warn(
            found["network"],
            "let agents run in a network of their own (SUREHAND_AGENT_NETWORK=egress, the "
            "default, with bubblewrap) and list what they may reach in SUREHAND_AGENT_EGRESS; "
            "here Postgres, Redis, the API and Flower must all require credentials",
        )
    return [*found.values(), *_check_preset(settings)]


def _warn(check: Check, fix: str) -> Check:
    return replace(check, status="warn", fix=fix)


_UNATTENDED = (
    "retry_max_attempts",
    "retry_backoff_seconds",
    "retry_backoff_max_seconds",
    "retry_overload_backoff_seconds",
    "agent_budget_usd",
)


def check_unattended(settings: Settings) -> list[Check]:
    """The retry policy and budget settings can be read (admission reads them each pass);
    nothing to report while they are all left at their defaults."""
    from surehand.config import Settings

    defaults = Settings.model_fields
    if all(getattr(settings, name) == defaults[name].default for name in _UNATTENDED):
        return []
    from surehand.agents.budgets import SETTING, role_budget
    from surehand.dispatcher.retry import check_settings
    from surehand.roles import per_role

    try:
        check_settings(settings)
        for role in {"DEV", *per_role(settings.agent_budget_usd, SETTING)[1]}:
            role_budget(settings, role)
    except SurehandError as error:
        return [Check("retry and budgets", "fail", error.message, "fix the setting it names")]
    return [Check("retry and budgets", "ok", "retry policy and budget settings read")]


def _check_preset(settings: Settings) -> list[Check]:
    """A preset (claude, codex) has what it needs: the mcp extra and its CLI on PATH."""
    from surehand.agents.command import CommandAgent
    from surehand.runtime import session_door

    try:
        agent = CommandAgent.from_settings(settings, session_door())
        if agent.program.preset is None:
            return []
        agent.require_ready()
    except SurehandError as error:
        return [Check("agent preset", "fail", error.message, "fix the setting it names")]
    return [Check("agent preset", "ok", f"{agent.program.preset}: {agent.program.base[0]}")]


def check_probes(settings: Settings, *, read_intents: bool = True) -> list[Check]:
    """The probes this configuration registers, and those open intents name but it lacks.

    Admission asks a probe only where it runs (workers, api, reconcile, up): an open intent
    whose probe is missing there is held after SUREHAND_PROBE_WAIT_SECONDS instead of decided.
    The built-in probes (with their versions) are registered everywhere, without settings.
    """
    from surehand.facade import Surehand

    try:
        sh = Surehand(settings=settings)
    except SurehandError:
        return []  # a database URL that does not parse: the database check says so
    try:
        # Built the way every deciding process builds it: SUREHAND_AGENTS, then SUREHAND_PROBES.
        registered = sh.registry.probe_names()
        labels = sh.registry.probe_labels()
    except ConfigError as error:
        return [Check("probes", "fail", error.message, "fix SUREHAND_PROBES / SUREHAND_AGENTS")]
    finally:
        sh.close()
    named = _probes_named_by_open_intents(settings) if read_intents else {}
    missing = {name: tasks for name, tasks in named.items() if name not in registered}
    builtin = [label for label in labels if "@" in label]
    others = [label for label in labels if "@" not in label]
    detail = f"built-in: {', '.join(builtin) or 'none'}; registered: {', '.join(others) or 'none'}"
    found = [Check("probes", "ok", detail)]
    if missing:
        found.append(_missing_probes(missing, settings))
    return found


def _probes_named_by_open_intents(settings: Settings) -> dict[str, list[str]]:
    """Probe name -> TASK ids of the open intents naming it (empty if the store cannot say)."""
    from sqlalchemy.exc import SQLAlchemyError

    from surehand.dispatcher import health
    from surehand.dispatcher.context import Services
    from surehand.store import Store

    store = Store(settings.resolved_database_url(), pool_size=1)
    try:
        return health.probes_of_open_intents(Services(store=store, settings=settings))
    except (SurehandError, SQLAlchemyError):
        return {}  # the database checks above say why
    finally:
        store.dispose()


def _missing_probes(missing: dict[str, list[str]], settings: Settings) -> Check:
    parts = []
    for name, task_ids in sorted(missing.items()):
        count = len(task_ids)
        sample = ", ".join(dict.fromkeys(task_ids[:3]))
        parts.append(f"{name!r} ({count} open intent{'s' if count > 1 else ''}, e.g. {sample})")
    return Check(
        "probes-not-registered",
        "warn",
        "open intents name probes not registered in this process: " + "; ".join(parts),
        "register them in every worker and api process (SUREHAND_PROBES=name=module:function, "
        "or @sh.probe in the agents module); an interrupted session's case waits "
        f"{settings.probe_wait_seconds:g}s (SUREHAND_PROBE_WAIT_SECONDS) for one, then holds",
    )
