"""The few statistics the benchmarks share."""

from __future__ import annotations


def nearest_rank(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` (not empty) by nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]
