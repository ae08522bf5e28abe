"""Say which backends ``./scripts/test`` tests on, as shell ``export`` lines for ``eval``.

A backend named by ``SUREHAND_TEST_DATABASE_URL`` / ``SUREHAND_TEST_REDIS_URL`` is used as it
is. Otherwise Postgres on 127.0.0.1:5432 (database ``test``, else ``postgres``) and Redis on
127.0.0.1:6379 (database 15) are used when they answer within a second. What was found is
printed on standard error, with the reason for each backend that is skipped.
"""

from __future__ import annotations

import os
import shlex
import sys

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/{database}"
DEFAULT_REDIS = "redis://127.0.0.1:6379/15"


def _postgres() -> tuple[str, str]:
    """The Postgres URL to test on, or "" and why not."""
    try:
        import psycopg
    except ImportError:
        return "", "psycopg is not installed"
    reason = "nothing answers on 127.0.0.1:5432"
    for database in ("test", "postgres"):
        try:
            psycopg.connect(
                f"host=127.0.0.1 port=5432 user=postgres dbname={database} connect_timeout=1"
            ).close()
        except psycopg.Error as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            continue
        return DEFAULT_PG.format(database=database), ""
    return "", f"Postgres on 127.0.0.1:5432: {reason}"


def _redis() -> tuple[str, str]:
    """The Redis URL to test on, or "" and why not."""
    import redis

    client = redis.Redis.from_url(DEFAULT_REDIS, socket_connect_timeout=1, socket_timeout=1)
    try:
        client.ping()
    except redis.RedisError as exc:
        return "", f"Redis on 127.0.0.1:6379: {exc}"
    finally:
        client.close()
    return DEFAULT_REDIS, ""


def main() -> None:
    found = {
        "SUREHAND_TEST_DATABASE_URL": ("Postgres", _postgres),
        "SUREHAND_TEST_REDIS_URL": ("Redis", _redis),
    }
    skipped: list[str] = []
    backends = ["SQLite", "fakeredis"]
    for variable, (name, detect) in found.items():
        url, why = (os.environ[variable], "") if os.environ.get(variable) else detect()
        if url:
            print(f"export {variable}={shlex.quote(url)}")
            backends.append(f"{name} ({url})")
        else:
            skipped.append(f"{name} tests ({why}; set {variable} to use another server)")
    print(f"surehand: testing on {', '.join(backends)}", file=sys.stderr)
    if skipped:
        note = "; ".join(skipped)
        print(f"surehand: skipping {note}", file=sys.stderr)
        print(f"export SUREHAND_TEST_SKIPPED={shlex.quote(note)}")


if __name__ == "__main__":
    main()
