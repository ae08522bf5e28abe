"""Settings from ``SUREHAND_*`` environment variables (pydantic-settings).

:class:`Settings` is every knob surehand reads, composed of one group per subsystem, each in
its own module: the store and the dispatcher's loops (:mod:`.store`), the agents and the
command agent (:mod:`.agents`), their confinement (:mod:`.sandbox`), how their sessions work
(:mod:`.sessions`), running unattended (:mod:`.unattended`) and the doors (:mod:`.doors`).
The embedded default needs none of them: a SQLite file under ``./.surehand/``, the in-process
memory broker and fakeredis for leases. A deployment sets the three URLs.
"""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict

from surehand.config.agents import AgentSettings
from surehand.config.doors import DoorSettings
from surehand.config.sandbox import SandboxSettings
from surehand.config.sessions import SessionSettings
from surehand.config.store import StoreSettings
from surehand.config.unattended import UnattendedSettings


# pydantic lists inherited fields from the last base to the first: the groups are named here
# in reverse so that the settings (and the generated reference) read store first, doors last.
class Settings(
    DoorSettings,
    UnattendedSettings,
    SessionSettings,
    SandboxSettings,
    AgentSettings,
    StoreSettings,
    BaseSettings,
):
    """Every knob surehand reads. Each field is the env var ``SUREHAND_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="SUREHAND_", extra="ignore", frozen=True)
