"""The one rule for skipping a test.

A test that cannot run here says why through one of two calls:

- :func:`missing` -- a service, binary, package or privilege this machine lacks. Locally that
  skips; in CI (``CI=true``) it fails, because a suite that goes green without running its
  real-process tests proves nothing.
- :func:`not_applicable` -- a test that cannot apply by design (a Postgres-only behaviour on
  SQLite). Its reason must be one of :data:`NOT_APPLICABLE`, the only skips CI accepts.

``tests/conftest.py`` collects every skip of a run; in CI the run fails when any skip's reason
is not an allowlisted not-applicable one (a bare ``pytest.skip`` or a ``skipif`` included).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import NoReturn

import pytest

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

NOT_APPLICABLE_PREFIX = "not applicable: "

NOT_APPLICABLE = frozenset(
    {
        "an in-process SQLite connection cannot be dropped by the server",
        "the fallback's limits are the same on every store",
        "SQLite serialises writers; the counter is allocated inside the create",
        "SQLite connections are in-process files, not server backends",
        "SQLite runs in-process: no round trips",
        "one statement on Postgres: see the concurrent-move test",
        "SQLite's write transactions are exclusive: nothing moves in between",
    }
)
"""Every reason a test may give for not applying; nothing else may skip in CI."""


def missing(what: str) -> NoReturn:
    """Skip (locally) or fail (in CI) a test that needs ``what``, which this machine lacks."""
    if IN_CI:
        pytest.fail(f"CI must provide {what}: a missing {what} fails the run, it never skips")
    _skip(f"missing: {what}")


def not_applicable(reason: str) -> NoReturn:
    """Skip a test that does not apply here by design; ``reason`` must be allowlisted."""
    if reason not in NOT_APPLICABLE:
        pytest.fail(f"not an allowlisted not-applicable reason (tests/skips.py): {reason!r}")
    _skip(NOT_APPLICABLE_PREFIX + reason)


def _skip(reason: str) -> NoReturn:
    # Reported at the test's location, as a skip mark is, not at this line (-ra groups skips
    # by location: every skip would be one line here).
    raise pytest.skip.Exception(reason, allow_module_level=True, _use_item_location=True)


def allowed(reason: str) -> bool:
    """Whether a skip with this reason (as pytest reports it) is allowed in CI."""
    reason = reason.removeprefix("Skipped: ")
    return reason.removeprefix(NOT_APPLICABLE_PREFIX) in NOT_APPLICABLE and reason.startswith(
        NOT_APPLICABLE_PREFIX
    )


def skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    """The reason pytest recorded for a skipped report."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):
        return str(longrepr[2])
    return str(longrepr)


def unexplained(reasons: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The (test, reason) pairs CI does not accept."""
    return [(test, reason) for test, reason in reasons if not allowed(reason)]
