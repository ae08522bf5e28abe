"""The arguments each built-in probe takes, validated like every door's input.

An effect names a probe and its arguments when it is declared (``ctx.operation(...,
probe="git.push", probe_args={...})``, ``surehand effect --probe-arg``, ``effect_begin``); the
agent is untrusted, so the arguments are checked here, at the door, and again (the same models)
where the probe runs. A name under a built-in namespace (``git.``, ``http.``, ``github.``) that
is no built-in probe is refused: it would never be answered.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

MAX_URL = 2048
REF_RE = re.compile(r"\Arefs/(?:[A-Za-z0-9._/+@-]{1,250})\Z")
BRANCH_RE = re.compile(r"\A[A-Za-z0-9._/+@-]{1,240}\Z")
COMMIT_RE = re.compile(r"\A(?:[0-9a-f]{40}|[0-9a-f]{64})\Z")
ENV_RE = re.compile(r"\A[A-Z_][A-Z0-9_]{0,127}\Z")
REPO_RE = re.compile(r"\A[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}\Z")
GIT_SCHEMES = ("file", "http", "https", "git", "ssh")
RESERVED = ("git.", "http.", "github.")


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)


def _ref(value: str) -> str:
    """A full ref name (``main`` is ``refs/heads/main``), without git's forbidden shapes."""
    ref = value if value.startswith("refs/") else f"refs/heads/{value}"
    if not REF_RE.match(ref) or not BRANCH_RE.match(ref.removeprefix("refs/")):
        raise ValueError("must be a ref name like main or refs/heads/main")
    if ".." in ref or ref.endswith((".", "/", ".lock")) or "//" in ref or "@{" in ref:
        raise ValueError("is not a valid git ref name")
    return ref


class GitPushArgs(_Args):
    """``git.push``: the remote (URL or absolute path), the ref pushed, the commit it had."""

    remote: Annotated[str, Field(min_length=1, max_length=MAX_URL)]
    ref: str
    commit: str

    @field_validator("remote")
    @classmethod
    def _remote(cls, value: str) -> str:
        return git_remote(value)

    @field_validator("ref")
    @classmethod
    def _ref(cls, value: str) -> str:
        return _ref(value)

    @field_validator("commit")
    @classmethod
    def _commit(cls, value: str) -> str:
        if not COMMIT_RE.match(value.lower()):
            raise ValueError("must be a full commit id (40 or 64 hex digits)")
        return value.lower()


def git_remote(value: str) -> str:
    """A remote git may be asked about without running anything: no option, no
    ``<transport>::`` helper, a known scheme, an absolute path or ``host:path``."""
    if value.startswith("-") or any(c in value for c in "\0\n\r "):
        raise ValueError("must be a remote URL, not an option or text with spaces")
    if "::" in value.split("/", 1)[0]:
        raise ValueError("a <transport>:: address runs a helper program: refused")
    scheme = urlsplit(value).scheme if "://" in value else ""
    if scheme and scheme not in GIT_SCHEMES:
        raise ValueError(f"scheme {scheme!r} is not one of {', '.join(GIT_SCHEMES)}")
    if not scheme and not value.startswith("/") and ":" not in value:
        raise ValueError("must be a URL, an absolute path or host:path")
    return value


def http_url(value: str) -> str:
    """An http(s) URL with a host, at most :data:`MAX_URL` characters, no credentials in it."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    if parts.username or parts.password:
        raise ValueError("must not carry credentials (name a variable in auth_env instead)")
    if any(c in value for c in "\0\n\r "):
        raise ValueError("must not contain spaces or line breaks")
    return value


class HttpRequestArgs(_Args):
    """``http.request``: GET ``url``; present when the status is one of ``status`` (and the
    JSON ``field``, if named, equals ``equals`` or, without it, is there and not empty);
    absent when the status is one of ``absent_status`` or the field does not match."""

    url: Annotated[str, Field(min_length=1, max_length=MAX_URL)]
    status: list[int] = [200]
    absent_status: list[int] = [404]
    field: Annotated[str | None, Field(max_length=255)] = None
    equals: Any = None
    auth_env: str | None = None
    auth_scheme: Literal["Bearer", "token", "Basic"] = "Bearer"

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return http_url(value)

    @field_validator("status", "absent_status", mode="before")
    @classmethod
    def _statuses(cls, value: Any) -> Any:
        items = value if isinstance(value, list) else str(value).split("|")
        return [_status(item) for item in items]

    @field_validator("auth_env")
    @classmethod
    def _env(cls, value: str | None) -> str | None:
        if value is not None and not ENV_RE.match(value):
            raise ValueError("must be an environment variable name like TICKETS_TOKEN")
        return value


def _status(item: Any) -> int:
    try:
        status = int(item)
    except (TypeError, ValueError):
        raise ValueError("must be HTTP status codes (e.g. 200 or 200|201)") from None
    if not 100 <= status <= 599:
        raise ValueError(f"{status} is not an HTTP status code")
    return status


class PullRequestArgs(_Args):
    """``github.pull_request``: a pull request from ``head`` exists in ``repo``
    (optionally into ``base``)."""

    repo: str
    head: Annotated[str, Field(min_length=1, max_length=255)]
    base: Annotated[str | None, Field(max_length=255)] = None

    @field_validator("repo")
    @classmethod
    def _repo(cls, value: str) -> str:
        if not REPO_RE.match(value) or {".", ".."} & set(value.split("/")):
            raise ValueError("must be owner/name")  # "..": another path of the forge's API
        return value

    @field_validator("head", "base")
    @classmethod
    def _branch(cls, value: str | None) -> str | None:
        if value is not None and not BRANCH_RE.match(value.removeprefix("refs/heads/")):
            raise ValueError("must be a branch name")
        return value.removeprefix("refs/heads/") if value else value


SCHEMAS: dict[str, type[_Args]] = {
    "git.push": GitPushArgs,
    "http.request": HttpRequestArgs,
    "github.pull_request": PullRequestArgs,
}


def check_probe_args(probe: str | None, args: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The probe arguments as recorded (normalised), or ValueError saying what is wrong.

    A built-in probe's arguments must fit its model; another (an operator's) probe gets them
    as given (a JSON object, checked for size by the caller)."""
    if probe is None:
        if args:
            raise ValueError("probe_args need a probe: name the probe they are for")
        return None
    schema = SCHEMAS.get(probe)
    if schema is None:
        if probe.startswith(RESERVED):
            known = ", ".join(sorted(SCHEMAS))
            raise ValueError(f"{probe!r} is no built-in probe (built-in: {known})")
        return dict(args) if args else None
    if args is None:
        raise ValueError(f"the {probe} probe needs its arguments ({_fields(schema)})")
    try:
        return schema.model_validate(dict(args)).model_dump(exclude_none=True)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "probe_args"
        raise ValueError(f"{where}: {first['msg']}") from None


def _fields(schema: type[_Args]) -> str:
    return ", ".join(
        name if info.is_required() else f"[{name}]" for name, info in schema.model_fields.items()
    )
