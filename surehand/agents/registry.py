"""Agent handlers registered per recipient role, and named probes for effect facts."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from surehand.agents.context import SessionContext
from surehand.agents.probes import ProbeResult, described
from surehand.errors import ConfigError, NoAgentForRole
from surehand.model import Operation
from surehand.requests import check_role

AgentHandler = Callable[[SessionContext], Any]
Probe = Callable[[Operation], "bool | ProbeResult | None"]
"""Answers whether an interrupted operation's effect happened: True, False, or None (unknown),
or a :class:`ProbeResult` that also says what the probe saw."""

# Probes declared with ``@sh.probe`` on any handle in this process, in order, with the module
# that defines each. An agents module usually builds its own handle (``Surehand.from_env()``),
# not the one of the ``surehand worker``/``beat``/``api`` process that imports it through
# SUREHAND_AGENTS; that process's registry adopts what the import declared (see ``load``).
_declared: list[tuple[str, str, Probe]] = []
# Agents modules being imported by a ``load`` right now (see ``AgentRegistry.load``).
_importing: set[str] = set()


def declare_probe(name: str, probe: Probe) -> None:
    """Note a probe declared in this process, for the registries that load its module."""
    _declared.append((getattr(probe, "__module__", "") or "", name, probe))


@dataclass(frozen=True)
class AgentSpec:
    role: str
    handler: AgentHandler
    review: bool = True  # settle to ``review`` (True) or straight to ``done`` (False)


class AgentRegistry:
    """Which handler runs a session for a TASK's recipient role, and which probes exist."""

    def __init__(self) -> None:
        self._agents: dict[str, AgentSpec] = {}
        self._probes: dict[str, Probe] = {}
        self._builtin_probes: set[str] = set()
        self.builtin: Callable[[str], AgentHandler | None] = lambda _name: None

    def register(self, role: str, handler: AgentHandler, *, review: bool = True) -> None:
        try:
            check_role(role)
        except ValueError as exc:
            raise ConfigError(f"agent role {role!r}: {exc}") from None
        self._agents[role] = AgentSpec(role, handler, review)

    def agent(self, role: str, *, review: bool = True) -> Callable[[AgentHandler], AgentHandler]:
        """Decorator: ``@registry.agent("DEV")``."""

        def decorate(handler: AgentHandler) -> AgentHandler:
            self.register(role, handler, review=review)
            return handler

        return decorate

    def register_probe(self, name: str, probe: Probe, *, builtin: bool = False) -> None:
        """Register ``probe`` under ``name`` (an operator's replaces a built-in one)."""
        self._probes[name] = probe
        if builtin:
            self._builtin_probes.add(name)
        else:
            self._builtin_probes.discard(name)

    def probe_labels(self) -> list[str]:
        """The probes as ``surehand check`` lists them: built-in ones with their version."""
        return [
            described(name) if name in self._builtin_probes else name for name in self.probe_names()
        ]

    def probe(self, name: str) -> Probe | None:
        return self._probes.get(name)

    def probe_names(self) -> list[str]:
        """The probes registered in this registry (what this process can ask)."""
        return sorted(self._probes)

    def load_probes(self, spec: str) -> None:
        """Load ``name=module:function[,name=...]`` (from SUREHAND_PROBES)."""
        loaded: dict[str, Probe] = {}
        for item in filter(None, (part.strip() for part in spec.split(","))):
            name, _, target = (part.strip() for part in item.partition("="))
            if not name or not target:
                raise _bad_probe(item, "write it as name=module:function")
            if name in loaded:
                raise _bad_probe(item, f"probe {name!r} is named twice; keep one entry")
            loaded[name] = _import_probe(item, target)
        for name, probe in loaded.items():
            self.register_probe(name, probe)

    def get(self, role: str) -> AgentSpec:
        spec = self._agents.get(role)
        if spec is None:
            raise NoAgentForRole(
                f"no agent handler for role {role!r}; register one with @sh.agent({role!r}) "
                "or SUREHAND_AGENTS=ROLE=module:function"
            )
        return spec

    def roles(self) -> list[str]:
        return sorted(self._agents)

    def load(self, spec: str) -> None:
        """Load ``ROLE=module:function[,ROLE=...]`` (from SUREHAND_AGENTS).

        An agents module usually makes a handle of its own (``Surehand.from_env()``) whose
        registry loads SUREHAND_AGENTS too, while that very module is being imported: such a
        nested load skips the modules being imported (the outer load registers them once they
        are), instead of importing a half-made module."""
        for item in filter(None, (part.strip() for part in spec.split(","))):
            role, _, target = item.partition("=")
            if target.strip().partition(":")[0] in _importing:
                continue
            declared = len(_declared)
            handler = self.builtin(target.strip()) or _import(target.strip())
            self.register(role.strip(), handler)
            self._adopt_probes(target.strip().partition(":")[0], since=declared)

    def _adopt_probes(self, module: str, *, since: int) -> None:
        """Register the probes ``@sh.probe`` declared in ``module`` or while importing it."""
        for index, (origin, name, probe) in enumerate(_declared):
            if index >= since or origin == module:
                self.register_probe(name, probe)

    def update(self, other: Mapping[str, AgentSpec]) -> None:
        self._agents.update(other)


def _import(target: str) -> AgentHandler:
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"agent {target!r}: use module:function")
    _importing.add(module_name)
    try:
        handler = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"agent {target!r} cannot be imported: {exc}") from exc
    finally:
        _importing.discard(module_name)
    if not callable(handler):
        raise ConfigError(f"agent {target!r} is not callable")
    return handler  # type: ignore[no-any-return]


def _bad_probe(item: str, fix: str) -> ConfigError:
    return ConfigError(f"SUREHAND_PROBES entry {item!r}: {fix}", setting="SUREHAND_PROBES")


def _import_probe(item: str, target: str) -> Probe:
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise _bad_probe(item, "use name=module:function")
    try:
        probe = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise _bad_probe(item, f"cannot be imported ({exc}); check the module path") from exc
    if not callable(probe):
        raise _bad_probe(item, f"{target} is not callable; name a function")
    return probe  # type: ignore[no-any-return]
