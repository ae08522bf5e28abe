"""Built-in agents by name, for ``SUREHAND_AGENTS=DEV=demo,QA=command``."""

from __future__ import annotations

from surehand.agents.command import CommandAgent
from surehand.agents.demo import demo_agent
from surehand.agents.registry import AgentHandler, AgentRegistry
from surehand.agents.session_door import SessionDoorFactory
from surehand.config import Settings

DEMO_ROLES = ("DEV", "QA", "OPS")


def builtin_handler(
    name: str, settings: Settings, session_door: SessionDoorFactory | None = None
) -> AgentHandler | None:
    """The built-in agent called ``name`` (``demo`` or ``command``), else None."""
    if name == "demo":
        return demo_agent
    if name == "command":
        return CommandAgent.from_settings(settings, session_door)
    return None


def register_builtin_agents(
    registry: AgentRegistry, settings: Settings, session_door: SessionDoorFactory | None = None
) -> None:
    """Install the resolver for built-in names used in SUREHAND_AGENTS.

    ``session_door`` serves command agents' session tools (None: they get none).
    """
    registry.builtin = lambda name: builtin_handler(name, settings, session_door)


def register_demo(registry: AgentRegistry) -> None:
    """The quick start's default: the demo agent for DEV, QA and OPS."""
    for role in DEMO_ROLES:
        registry.register(role, demo_agent)
