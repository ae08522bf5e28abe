"""``podman-compose config`` resolves both file sets the deployment guide names: the default
file alone (what Docker users run: the official images) and the default file with the podman
override (the stand-ins built from Debian's packages), and the override changes nothing but
the ``image`` of ``postgres`` and ``redis``; and the default file does not resolve without
either password (Postgres' and Redis' have no defaults).

compose/check runs it first (``python config.py PODMAN_COMPOSE``, with the Python that
podman-compose is installed in: it needs PyYAML); tests/project/test_compose.py runs it whenever
podman-compose is on the machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

COMPOSE = Path(__file__).resolve().parent.parent
DEFAULT = COMPOSE / "docker-compose.yml"
OVERRIDE = COMPOSE / "docker-compose.podman.yml"
# The variables the compose file requires (``${VAR:?...}``); any value resolves.
REQUIRED = {
    "SUREHAND_API_TOKENS": "config-check-token-0123456789=check:ADMIN:default",
    "SUREHAND_METRICS_TOKEN": "config-check-metrics-0123456789",
    "FLOWER_BASIC_AUTH": "check:config",
    "POSTGRES_PASSWORD": "config-check-postgres",
    "REDIS_PASSWORD": "config-check-redis",
}
STAND_INS = {
    "postgres": "localhost/surehand-postgres:bookworm",
    "redis": "localhost/surehand-redis:bookworm",
}
OFFICIAL = {"postgres": "postgres:16", "redis": "redis:7"}


def resolve(podman_compose: str, files: tuple[Path, ...], without: str = "") -> dict[str, Any]:
    """The services as ``podman-compose config`` resolves ``files`` (a failure raises), with
    every required variable set but ``without``."""
    done = _config(podman_compose, files, without)
    if done.returncode != 0:
        names = [path.name for path in files]
        raise AssertionError(f"podman-compose config of {names}: {done.stderr[-600:]}")
    services: dict[str, Any] = yaml.safe_load(done.stdout)["services"]
    return services


def _config(
    podman_compose: str, files: tuple[Path, ...], without: str
) -> subprocess.CompletedProcess[str]:
    argv = [podman_compose, *(arg for path in files for arg in ("-f", str(path))), "config"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SUREHAND_", "FLOWER_"))}
    env.update(REQUIRED)
    for name in ("IMAGE", "BASE_IMAGE", "WORKER_SECCOMP", without):  # defaults, not the caller's
        env.pop(name, None)
    return subprocess.run(argv, env=env, capture_output=True, text=True, check=False)


def passwords_required(podman_compose: str) -> str:
    """The default file does not resolve without each password, and says which is missing."""
    for name in ("POSTGRES_PASSWORD", "REDIS_PASSWORD"):
        done = _config(podman_compose, (DEFAULT,), name)
        if done.returncode == 0 or f"required variable {name} is missing" not in done.stderr:
            raise AssertionError(f"the default file resolves without {name}: {done.stderr[-300:]}")
    return "without POSTGRES_PASSWORD or REDIS_PASSWORD the default file does not resolve"


def both_file_sets_resolve(podman_compose: str, override: Path = OVERRIDE) -> str:
    """Resolve both file sets and compare them; what was shown, or AssertionError."""
    default = resolve(podman_compose, (DEFAULT,))
    podman = resolve(podman_compose, (DEFAULT, override))
    images = {name: spec.get("image") for name, spec in default.items()}
    if {name: images.get(name) for name in OFFICIAL} != OFFICIAL:
        raise AssertionError(f"the default file does not resolve to the official images: {images}")
    surehand = {name: spec for name, spec in default.items() if name not in OFFICIAL}
    for name, spec in surehand.items():
        args = spec.get("build", {}).get("args", [])  # podman-compose lists them as KEY=VALUE
        if "BASE_IMAGE=python:3.11-slim" not in args:
            raise AssertionError(f"{name} does not build on python:3.11-slim: {args}")
    if set(podman) != set(default):
        raise AssertionError(f"the pair names {sorted(podman)}, the default {sorted(default)}")
    for name, spec in podman.items():
        expected = default[name] | ({"image": STAND_INS[name]} if name in STAND_INS else {})
        if spec != expected:
            changed = sorted(k for k in set(spec) | set(expected) if spec.get(k) != expected.get(k))
            raise AssertionError(f"the podman override changes {name}'s {changed}")
    return (
        f"{len(default)} services; default file: {OFFICIAL['postgres']}, {OFFICIAL['redis']}, "
        f"surehand on python:3.11-slim; with the podman override only the stand-ins' images differ"
    )


def main() -> int:
    try:
        shown = both_file_sets_resolve(sys.argv[1])
        required = passwords_required(sys.argv[1])
    except AssertionError as error:
        print(f"check: FAILED: podman-compose config: {error}", file=sys.stderr)
        return 1
    print(f"check: podman-compose config resolves both file sets: ok ({shown})", flush=True)
    print(f"check: no default passwords: ok ({required})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
