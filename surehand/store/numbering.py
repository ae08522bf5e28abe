"""TASK numbers that reveal no volume: the day's counter value, permuted under a secret key.

A TASK id is ``TASK-YYYYMMDD-NNN``. Numbering TASKs 001, 002, ... from one counter would show
every tenant how many TASKs all tenants created that day (two ids an hour apart tell the rate).
So the counter stays one atomic, never-reused sequence per day -- ids stay globally unique, one
primary key, no tenant in messages or lease keys -- and the id shows ``present(n)`` instead of
``n``: a keyed pseudo-random permutation of the numbers with as many digits as ``n``, under a
random key that the day's counter row holds (made by the allocation that creates the row; the
database never hands it to a caller). Different ``n`` of one day give different numbers, so ids
are never reused; an id says nothing about how many came before it.

What the width still says: a number keeps the digit count of ``n`` (at least three), so a
4-digit number tells that the deployment created 1,000 or more TASKs that day -- the order of
magnitude of the deployment's daily volume, no more.

The permutation is a balanced Feistel network (BLAKE2b keyed round function, halves added
modulo ``side``) over the smallest square domain that holds the tier, with cycle-walking back
into the tier: a bijection of the tier onto itself for every key.
"""

from __future__ import annotations

import hashlib
import math
import secrets
from functools import lru_cache
from typing import Any

MIN_DIGITS = 3
ROUNDS = 8  # small domains want more rounds than a block cipher's 3-4
SECRET_HEX_CHARS = 32  # 128-bit keys


def new_secret() -> str:
    """A fresh key for a day's counter row (hex)."""
    return secrets.token_hex(SECRET_HEX_CHARS // 2)


def present(number: int, secret: str | None) -> int:
    """The number shown in the id of the day's ``number``-th TASK (``number`` >= 1).

    ``secret`` None: a day counted before numbers were permuted (migration 0008), whose ids
    are sequential already; it continues sequentially so that no id of that day is reused.
    """
    if secret is None:
        return number
    low, size = tier(number)
    return low + _permute(number - low, size, _keyed(secret, size))


def tier(number: int) -> tuple[int, int]:
    """The first number and the size of the range of numbers with as many digits as
    ``number`` (three-digit numbers start at 1: ``000`` is never shown)."""
    digits = max(MIN_DIGITS, len(str(number)))
    low = 1 if digits == MIN_DIGITS else 10 ** (digits - 1)
    return low, 10**digits - low


@lru_cache(maxsize=64)
def _keyed(secret: str, size: int) -> Any:
    # One key per day and tier; a copy of the keyed hash state is cheaper than re-keying.
    return hashlib.blake2b(key=bytes.fromhex(secret) + size.to_bytes(8, "big"), digest_size=8)


def _permute(index: int, size: int, key: Any) -> int:
    side = math.isqrt(size - 1) + 1  # the Feistel permutes [0, side**2), just over size
    value = _feistel(index, side, key)
    # Cycle-walking: walking on until a value falls back into [0, size) gives a permutation
    # of [0, size) (every cycle through a value below size returns to one).
    while value >= size:
        value = _feistel(value, side, key)
    return value


def permute(index: int, size: int, secret: str) -> int:
    """A keyed permutation of ``[0, size)`` (``size`` >= 2): ``index`` → its image."""
    return _permute(index, size, _keyed(secret, size))


def unpermute(image: int, size: int, secret: str) -> int:
    """The inverse of :func:`permute`: the index whose image is ``image``."""
    key, side = _keyed(secret, size), math.isqrt(size - 1) + 1
    value = _unfeistel(image, side, key)
    while value >= size:  # cycle-walking backwards retraces the forward walk
        value = _unfeistel(value, side, key)
    return value


def _unfeistel(value: int, side: int, key: Any) -> int:
    left, right = divmod(value, side)
    for round_ in reversed(range(ROUNDS)):
        left, right = (right - _round(key, round_, left)) % side, left
    return left * side + right


def _feistel(value: int, side: int, key: Any) -> int:
    # Halves in Z_side, rounds add modulo side: each round is invertible, so is the network.
    left, right = divmod(value, side)
    for round_ in range(ROUNDS):
        left, right = right, (left + _round(key, round_, right)) % side
    return left * side + right


def _round(key: Any, round_: int, value: int) -> int:
    state = key.copy()
    state.update(round_.to_bytes(1, "big") + value.to_bytes(8, "big"))
    return int.from_bytes(state.digest(), "big")
