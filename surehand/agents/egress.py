"""Where an agent's program may connect in the egress network mode: the operator's allowlist.

``SUREHAND_AGENT_EGRESS`` lists destinations, comma separated; each preset adds the model API
it talks to (:data:`PRESET_APIS`):

- ``host`` (every port) or ``host:port``: that name exactly;
- ``*.suffix`` or ``*.suffix:port``: every name under ``suffix`` (not ``suffix`` itself);
- ``IP``, ``IP:port``, ``[IPv6]`` or ``[IPv6]:port``: that address exactly.

A name is resolved by the worker, once per connection, and the connection goes to an address
that was checked (never to a name resolved again). An address that is not public -- the
worker's loopback, private ranges, link-local (cloud metadata at 169.254.169.254), multicast,
shared or reserved space, and the same hidden in IPv6 (mapped, 6to4, NAT64, Teredo) -- is
admitted only by an entry that names it or its name exactly: a wildcard, and a preset's model
API, admit public addresses only. A loopback entry must name its port (the worker's loopback
holds the store, the broker and the API): ``127.0.0.1:8080``, ``localhost:8080``.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from surehand.errors import ConfigError

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
SETTING = "SUREHAND_AGENT_EGRESS"
PRESET_APIS = {"claude": "api.anthropic.com:443", "codex": "api.openai.com:443"}
# The names a program reaches without the proxy (NO_PROXY): the session server's door and the
# listed loopback destinations, forwarded into its own network namespace.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
_NAME = re.compile(r"\A(?=.{1,253}\Z)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.?)+\Z")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


@dataclass(frozen=True)
class Rule:
    """One allowed destination: a name, a name suffix (``wildcard``) or an address."""

    host: str  # a lower-case name, the suffix of a wildcard, or an address's text
    port: int | None  # None: every port
    wildcard: bool = False
    public_only: bool = False  # a wildcard's or a preset's: never a non-public address

    @property
    def address(self) -> Address | None:
        """The address an address entry names (None for names)."""
        return _address(self.host)

    def matches(self, host: str, port: int) -> bool:
        """Whether a connection to ``host:port`` (a normalised name or address) is this one."""
        if self.port is not None and port != self.port:
            return False
        if self.wildcard:
            return host.endswith(f".{self.host}")
        return host == self.host

    def admits(self, address: Address) -> bool:
        """Whether this rule lets a connection go to ``address`` (what its host resolved to)."""
        return public(address) or not self.public_only

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        host = f"*.{host}" if self.wildcard else host
        return host if self.port is None else f"{host}:{self.port}"


@dataclass(frozen=True)
class Allowlist:
    """The destinations one command agent's programs may reach (:meth:`parse` it)."""

    rules: tuple[Rule, ...]

    @classmethod
    def parse(cls, text: str, *, command_agent: str = "") -> Allowlist:
        """``SUREHAND_AGENT_EGRESS`` and the model API of the preset ``command_agent`` names;
        ConfigError naming the entry that is not a destination."""
        rules = [parse_rule(item) for item in text.split(",") if item.strip()]
        preset = preset_of(command_agent)
        if preset is not None:
            rules.append(_public_only(parse_rule(PRESET_APIS[preset])))
        return cls(tuple(dict.fromkeys(rules)))

    def rule_for(self, host: str, port: int) -> Rule | None:
        """The first rule that allows ``host:port`` (None: refused)."""
        name = normalise(host)
        return next((rule for rule in self.rules if rule.matches(name, port)), None)

    def loopback_forwards(self) -> list[tuple[str, int]]:
        """(address, port) of each listed destination on the worker's loopback that a program
        reaches directly (one of :data:`LOOPBACK_NAMES`, which skip the proxy)."""
        found = []
        for rule in self.rules:
            if rule.host in LOOPBACK_NAMES and rule.port is not None and not rule.wildcard:
                found.append(("127.0.0.1" if rule.host == "localhost" else rule.host, rule.port))
        return sorted(set(found))

    def describe(self) -> str:
        """The list as the start line shows it."""
        return ", ".join(map(str, self.rules)) or "nothing"


def parse_rule(item: str) -> Rule:
    """One entry of ``SUREHAND_AGENT_EGRESS`` (ConfigError if it is none)."""
    text = item.strip().lower()
    host, port = _split(text, item)
    wildcard = host.startswith("*.")
    host = normalise(host.removeprefix("*.")) if wildcard else normalise(host)
    address = _address(host)
    if (wildcard and address is not None) or (address is None and not _NAME.match(host)):
        raise _bad(item, "is not a host name, *.suffix or IP address")
    if port is None and (host == "localhost" or (address is not None and address.is_loopback)):
        raise _bad(
            item,
            "names the worker's loopback without a port (it holds the store, the broker and "
            f"the API): list the one port, e.g. {host}:8080",
        )
    return Rule(host, port, wildcard=wildcard, public_only=wildcard)


def _split(text: str, item: str) -> tuple[str, int | None]:
    if text.startswith("["):  # [IPv6] or [IPv6]:port
        host, _, rest = text[1:].partition("]")
        port_text = rest.removeprefix(":") if rest.startswith(":") else None
        if rest and port_text is None:
            raise _bad(item, "has text after the bracketed address")
        return host, _port(port_text, item)
    if text.count(":") > 1:  # a bare IPv6 address: no port
        return text, None
    host, colon, port_text = text.partition(":")
    return host, _port(port_text if colon else None, item)


def _port(text: str | None, item: str) -> int | None:
    if text is None:
        return None
    if not text.isdigit() or not 0 < int(text) <= 65535:
        raise _bad(item, "has no port between 1 and 65535 after its colon")
    return int(text)


def _bad(item: str, why: str) -> ConfigError:
    return ConfigError(
        f"{SETTING} entry {item.strip()!r} {why} (entries: host, host:port, *.suffix, IP, "
        "IP:port, [IPv6]:port)",
        setting=SETTING,
    )


def _public_only(rule: Rule) -> Rule:
    return Rule(rule.host, rule.port, wildcard=rule.wildcard, public_only=True)


def normalise(host: str) -> str:
    """A host as rules compare it: lower case, no brackets, no final dot, addresses in their
    canonical text (``::ffff:7f00:1`` stays IPv6: it is checked by what it embeds)."""
    host = host.strip().lower().removeprefix("[").removesuffix("]").rstrip(".")
    address = _address(host)
    return str(address) if address is not None else host


def _address(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def public(address: Address) -> bool:
    """Whether ``address`` is on the public internet: not loopback, private, link-local,
    multicast, shared (100.64/10), reserved or unspecified, nor an IPv6 address that embeds
    such an IPv4 one (mapped, 6to4, NAT64, Teredo)."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded(address)
        if embedded is not None:
            return public(embedded)
    return address.is_global and not address.is_multicast


def _embedded(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def preset_of(command_agent: str) -> str | None:
    """The preset ``SUREHAND_COMMAND_AGENT`` names (by name or by the path of its CLI)."""
    try:
        argv = shlex.split(command_agent)
    except ValueError:
        return None
    name = Path(argv[0]).name if argv else ""
    return name if name in PRESET_APIS else None
