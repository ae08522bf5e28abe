"""Session leases in Redis: acquire (``SET NX PX``, or a TTL refresh when the same attempt
already holds it), compare-and-renew, compare-and-delete.

A lease says "attempt A of this TASK is alive"; it is liveness only. Redis TTLs follow the
server's wall clock and a process can pause past its TTL, so a lease can never prove that a
write is safe: every session write is fenced in the store by epoch instead. What the lease must
get right is narrower: only the holder may extend or remove it, which is why renew and release
are compare-then-act Lua scripts (the redis.io locking pattern). Acquire is idempotent for its own
attempt: a retry after a lost reply (the SET happened, the answer did not arrive) finds its own
attempt id in the key and succeeds, instead of calling it "held by another attempt".

Every Redis failure surfaces as :class:`~surehand.errors.LeaseUnavailable` (retryable); no
redis-py exception escapes this module.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator, Sequence
from importlib import resources
from typing import Any

import redis
from redis.commands.core import Script

from surehand.errors import LeaseUnavailable
from surehand.queue import keys

DEFAULT_BATCH_SIZE = 1000
# How often the WATCH/MULTI fallback retries when the key changes under it; a key that keeps
# changing is not ours to extend, so giving up (returning False) is the conservative answer.
_WATCH_RETRIES = 8


def _load_script(name: str) -> str:
    return resources.files("surehand.queue").joinpath(name).read_text(encoding="utf-8")


RENEW_LUA = _load_script("renew.lua")
RELEASE_LUA = _load_script("release.lua")
ACQUIRE_LUA = _load_script("acquire.lua")


@contextlib.contextmanager
def _translated(action: str, task_id: str = "") -> Iterator[None]:
    """Turn any redis-py error into the typed, retryable ``LeaseUnavailable``."""
    try:
        yield
    except redis.RedisError as exc:
        raise LeaseUnavailable(
            f"Redis failed during lease {action}: {type(exc).__name__}: {exc}",
            action=action,
            task_id=task_id,
        ) from exc


def _is_unknown_command(exc: redis.ResponseError) -> bool:
    # fakeredis without its optional Lua runtime (lupa) answers EVALSHA this way.
    return "unknown command" in str(exc).lower()


class LeaseStore:
    """Leases of one namespace on one Redis. Thread safe (redis-py pools its connections).

    ``scripting=None`` detects whether the server runs Lua and falls back to WATCH/MULTI
    compare-and-set if it does not; ``False`` forces that fallback (tests use it to cover it).
    """

    def __init__(
        self,
        client: redis.Redis,
        namespace: str = "",
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        scripting: bool | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self._redis = client
        self.namespace = namespace
        self.batch_size = batch_size
        self._scripting = scripting
        self._renew: Script = client.register_script(RENEW_LUA)
        self._release: Script = client.register_script(RELEASE_LUA)
        self._acquire: Script = client.register_script(ACQUIRE_LUA)

    @property
    def client(self) -> redis.Redis:
        return self._redis

    @property
    def scripting(self) -> bool | None:
        """False once the server turned out (or was declared) to lack Lua; else None/True."""
        return self._scripting

    def key(self, task_id: str) -> str:
        return keys.lease_key(task_id, self.namespace)

    def ping(self) -> None:
        """Raise ``LeaseUnavailable`` unless Redis answers."""
        with _translated("ping"):
            self._redis.ping()

    def acquire(self, task_id: str, attempt_id: str, ttl_ms: int) -> bool:
        """Take the lease for ``attempt_id`` unless another attempt holds it; if ``attempt_id``
        already holds it (a retry after a lost reply), reset its TTL and return True."""
        _check_ttl(ttl_ms)
        with _translated("acquire", task_id):
            taken, _ = self._take(self.key(task_id), attempt_id, ttl_ms, None)
        return taken

    def acquire_with_generation(
        self, task_id: str, attempt_id: str, ttl_ms: int
    ) -> tuple[bool, str]:
        """:meth:`acquire` and :meth:`ensure_generation` in one command (a Lua script; one
        WATCH/MULTI/EXEC round trip where the server runs no Lua).

        Returns whether the lease is held by ``attempt_id`` and the generation marker current
        at that moment, which is what a :class:`~surehand.queue.heartbeat.Heartbeat` started
        right after needs.
        """
        _check_ttl(ttl_ms)
        generation = (keys.generation_key(self.namespace), uuid.uuid4().hex)
        with _translated("acquire", task_id):
            taken, value = self._take(self.key(task_id), attempt_id, ttl_ms, generation)
        return taken, str(value)

    def _take(
        self, lease: str, attempt_id: str, ttl_ms: int, generation: tuple[str, str] | None
    ) -> tuple[bool, str | None]:
        """Run acquire.lua, or its WATCH/MULTI equivalent on a server without Lua."""
        if self._scripting is not False:
            extra_keys, marker = ([generation[0]], generation[1]) if generation else ([], "")
            try:
                answer = self._acquire(keys=[lease, *extra_keys], args=[attempt_id, ttl_ms, marker])
            except redis.ResponseError as exc:
                if not _is_unknown_command(exc):
                    raise
                self._scripting = False
            else:
                return bool(answer[0]), (str(answer[1]) if generation else None)
        return self._watch_take(lease, attempt_id, ttl_ms, generation)

    def _watch_take(
        self, lease: str, attempt_id: str, ttl_ms: int, generation: tuple[str, str] | None
    ) -> tuple[bool, str | None]:
        """acquire.lua as an optimistic WATCH/MULTI transaction: SET PX when the key is free,
        PEXPIRE when ``attempt_id`` holds it, nothing (but the generation) otherwise."""
        with self._redis.pipeline() as pipe:
            for _ in range(_WATCH_RETRIES):
                try:
                    pipe.watch(lease)  # type: ignore[no-untyped-call]  # untyped in redis-py
                    holder = pipe.get(lease)
                    pipe.multi()
                    if holder is None:
                        pipe.set(lease, attempt_id, px=ttl_ms)
                    elif holder == attempt_id:
                        pipe.pexpire(lease, ttl_ms)
                    _queue_generation(pipe, generation)
                    answer = pipe.execute()
                    return holder in (None, attempt_id), _generation_of(answer, generation)
                except redis.WatchError:
                    continue
        # The key kept changing under us: not ours to take (the conservative answer).
        return False, self.ensure_generation() if generation else None

    def renew(self, task_id: str, attempt_id: str, ttl_ms: int) -> bool:
        """Reset the TTL to ``ttl_ms`` if ``attempt_id`` still holds the lease."""
        _check_ttl(ttl_ms)
        key = self.key(task_id)
        with _translated("renew", task_id):
            return self._compare_and(
                self._renew, key, [attempt_id, ttl_ms], lambda p: p.pexpire(key, ttl_ms)
            )

    def release(self, task_id: str, attempt_id: str) -> bool:
        """Delete the lease if ``attempt_id`` holds it; never touches a successor's lease."""
        key = self.key(task_id)
        with _translated("release", task_id):
            return self._compare_and(self._release, key, [attempt_id], lambda p: p.delete(key))

    def holder(self, task_id: str) -> str | None:
        """The attempt id holding the lease, or None if nobody does."""
        with _translated("holder", task_id):
            value = self._redis.get(self.key(task_id))
        return None if value is None else str(value)

    def holders(self, task_ids: Sequence[str]) -> dict[str, str | None]:
        """Holders of many leases: one ``MGET`` round trip per ``batch_size`` TASKs.

        The reconciler calls this once per pass, so its cost grows with the number of running
        attempts, not with the number of TASKs or of keys in Redis.
        """
        result: dict[str, str | None] = {}
        for start in range(0, len(task_ids), self.batch_size):
            chunk = task_ids[start : start + self.batch_size]
            with _translated("holders"):
                values = self._redis.mget(keys.lease_keys(chunk, self.namespace))
            result.update(
                (task_id, None if value is None else str(value))
                for task_id, value in zip(chunk, values, strict=True)
            )
        return result

    def remaining_ms(self, task_ids: Sequence[str]) -> dict[str, int | None]:
        """Milliseconds each TASK's lease has left (None: no lease), in one round trip."""
        if not task_ids:
            return {}
        with _translated("remaining"):
            pipe = self._redis.pipeline(transaction=False)
            for key in keys.lease_keys(task_ids, self.namespace):
                pipe.pttl(key)
            answers = pipe.execute()
        return {
            task_id: int(ms) if int(ms) >= 0 else None
            for task_id, ms in zip(task_ids, answers, strict=True)
        }

    def record_pass(self, at: float, seconds: float) -> None:
        """Note a reconciler pass (when, how long) for the console's workers page; a day."""
        with _translated("record_pass"):
            self._redis.set(self._pass_key, f"{at:.3f} {seconds:.6f}", ex=86_400)

    def last_pass(self) -> tuple[float, float] | None:
        """``(when, seconds)`` of the last reconciler pass any process noted, or None."""
        with _translated("last_pass"):
            value = self._redis.get(self._pass_key)
        if value is None:
            return None
        at, _, seconds = str(value).partition(" ")
        return float(at), float(seconds)

    @property
    def _pass_key(self) -> str:
        return keys.last_pass_key(self.namespace)

    def ensure_generation(self) -> str:
        """The dataset generation marker, minted if missing (one round trip)."""
        key = keys.generation_key(self.namespace)
        with _translated("generation"), self._redis.pipeline(transaction=True) as pipe:
            pipe.set(key, uuid.uuid4().hex, nx=True)
            pipe.get(key)
            _, value = pipe.execute()
        return str(value)

    def generation(self) -> str | None:
        """The current dataset generation marker, or None if Redis has forgotten it."""
        with _translated("generation"):
            value = self._redis.get(keys.generation_key(self.namespace))
        return None if value is None else str(value)

    def _compare_and(
        self, script: Script, key: str, args: list[Any], action: Callable[[Any], object]
    ) -> bool:
        if self._scripting is not False:
            try:
                return bool(script(keys=[key], args=args))
            except redis.ResponseError as exc:
                if not _is_unknown_command(exc):
                    raise
                self._scripting = False
        return self._watch_compare_and(key, str(args[0]), action)

    def _watch_compare_and(self, key: str, expected: str, action: Callable[[Any], object]) -> bool:
        """The same compare-then-act as the scripts, as an optimistic WATCH/MULTI transaction."""
        with self._redis.pipeline() as pipe:
            for _ in range(_WATCH_RETRIES):
                try:
                    pipe.watch(key)  # type: ignore[no-untyped-call]  # untyped in redis-py
                    if pipe.get(key) != expected:
                        return False
                    pipe.multi()
                    action(pipe)
                    return bool(pipe.execute()[0])
                except redis.WatchError:
                    continue
        return False


def _queue_generation(pipe: Any, generation: tuple[str, str] | None) -> None:
    """Queue "mint the generation marker if missing, then read it" on a MULTI pipeline."""
    if generation is not None:
        pipe.set(generation[0], generation[1], nx=True)
        pipe.get(generation[0])


def _generation_of(answer: list[Any], generation: tuple[str, str] | None) -> str | None:
    return str(answer[-1]) if generation is not None else None


def _check_ttl(ttl_ms: int) -> None:
    if ttl_ms <= 0:
        raise ValueError(f"lease TTL must be a positive number of milliseconds, got {ttl_ms}")
