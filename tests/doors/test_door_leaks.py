"""The doors' last leaks (issue 20), each closed and shown closed.

REPORT numbers and operation and event ids no longer count every tenant's volume; the public
``/healthz`` names no database, host or user when the store fails; a URL's ``?password=`` is
masked like its password; a worker's metrics port checks ``Host`` and refuses to listen off
loopback without a token; a token is compared with every configured one, never stopping at the
match; host entries that could never match are refused, and ``[::1]evil.com`` is not ``[::1]``.
"""

from __future__ import annotations

import hmac
import itertools
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from surehand.api import create_app
from surehand.config import Settings
from surehand.doors.auth import Authenticator
from surehand.doors.hosts import HostRule, split_host
from surehand.errors import AuthError, ConfigError, StoreUnavailable
from surehand.facade import Surehand
from surehand.metrics_port import check_port, serve_metrics
from surehand.store import Store, describe_url
from surehand.testing import ManualClock
from tests.recovery_helpers import Rig, open_rig


def increasing_by_one(numbers: list[int]) -> bool:
    return all(b - a == 1 for a, b in itertools.pairwise(numbers))


@pytest.fixture
def two_tenants(store: Store, clock: ManualClock, tmp_path: Any) -> Iterator[tuple[Rig, Rig]]:
    with (
        open_rig(store, clock, tmp_path, tenant="acme") as acme,
        open_rig(store, clock, tmp_path, tenant="globex") as globex,
    ):
        yield acme, globex


def _report_number(report_id: str) -> int:
    return int(report_id.rsplit("-", 1)[1])


def test_report_numbers_show_no_volume(two_tenants: tuple[Rig, Rig]) -> None:
    """Before: one sequential counter for all tenants (REPORT-...-001, -002, ...): acme's two
    REPORTs a globex burst apart were 21 apart. Now the numbers are permuted."""
    acme, globex = two_tenants
    mine = []
    for round_ in range(12):
        task_id = acme.new_task()
        acme.claim(task_id)
        mine.append(acme.sh.write_report(task_id=task_id, reporter="DEV", body=f"r{round_}"))
        other = globex.new_task()
        globex.claim(other)
        for n in range(5):
            globex.sh.write_report(task_id=other, reporter="DEV", body=f"burst {n}")
    numbers = [_report_number(result.report.report_id) for result in mine]
    assert len(set(numbers)) == len(numbers)
    assert not increasing_by_one(numbers)
    gaps = {b - a for a, b in itertools.pairwise(numbers)}
    assert gaps != {6}  # acme's numbers do not step over globex's five


def test_operation_and_event_ids_show_no_volume(two_tenants: tuple[Rig, Rig]) -> None:
    """Before: the autoincrement itself (1, 2, 3, ...), shared by all tenants."""
    acme, globex = two_tenants
    task_id = acme.new_task()
    session = acme.claim(task_id)
    ids = []
    for number in range(8):
        ids.append(acme.intent(session, f"step{number}", args={"n": number}).operation_id)
        other = globex.claim(globex.new_task())
        globex.intent(other, "noise", args={"n": number})
    assert len(set(ids)) == len(ids)
    assert not increasing_by_one(ids)
    assert all(0 < op_id < 2**53 for op_id in ids)  # exact in JavaScript, too
    assert [acme.operation(op_id).name for op_id in ids] == [f"step{n}" for n in range(8)]
    events = [event.event_id for event in acme.events(task_id)]
    assert len(set(events)) == len(events)
    assert not increasing_by_one(sorted(events))


def test_healthz_names_no_database_when_the_store_fails(store: Store) -> None:
    """Before: the 503's detail was the store error's message, naming the database."""
    sh = Surehand(settings=Settings(database_url=store.url))
    try:
        app = create_app(sh)
        failing = StoreUnavailable(
            "the database at postgresql://secretuser@db.internal/secretdb is unreachable"
        )

        def refuse() -> Any:
            raise failing

        sh.store.snapshot = refuse  # type: ignore[method-assign]
        with TestClient(app, base_url="http://127.0.0.1") as http:
            health = http.get("/healthz")
    finally:
        sh.close()
    assert health.status_code == 503
    for secret in ("secretuser", "db.internal", "secretdb", "postgresql"):
        assert secret not in health.text
    assert health.json()["code"] == "not_ready"


def test_a_password_in_the_query_is_masked_like_the_password() -> None:
    """Before: ``describe()`` hid ``user:password@`` only."""
    shown = describe_url(
        "postgresql+psycopg://app:pw1@db/surehand?password=pw2&sslpassword=pw3&sslmode=require"
    )
    for secret in ("pw1", "pw2", "pw3"):
        assert secret not in shown
    assert "sslmode=require" in shown


def test_the_worker_metrics_port_checks_host_and_needs_a_token_off_loopback() -> None:
    """Before: any Host was answered (a rebound page could read the port) and compose bound
    it on 0.0.0.0 with an empty token."""
    with pytest.raises(ConfigError, match="SUREHAND_METRICS_TOKEN"):
        check_port("0.0.0.0", "")
    check_port("0.0.0.0", "a-token-for-prometheus")
    check_port("127.0.0.1", "")
    server = serve_metrics("127.0.0.1", 0, hosts=HostRule.of(["worker-dev"]))
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        assert httpx.get(url).status_code == 200
        assert httpx.get(url, headers={"Host": "evil.example"}).status_code == 421
        assert httpx.get(url, headers={"Host": "worker-dev:9100"}).status_code == 200
    finally:
        server.shutdown()
        server.server_close()


def test_a_token_is_compared_with_every_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the loop returned at the first match, so the time taken told which entry (and
    so how many entries come before it) matched."""
    tokens = ",".join(f"token-number-{n:04d}=p{n}:PM:acme" for n in range(6))
    auth = Authenticator(Settings(api_tokens=tokens))
    compared: list[bytes] = []
    original = hmac.compare_digest

    def counting(a: Any, b: Any) -> bool:
        compared.append(bytes(a))
        return original(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)  # the module principals uses
    assert auth.authenticate("Bearer token-number-0000").name == "p0"
    assert len(compared) == 6
    compared.clear()
    with pytest.raises(AuthError):
        auth.authenticate("Bearer token-number-9999")
    assert len(compared) == 6


def test_host_entries_that_can_never_match_are_refused() -> None:
    """Before: ``[::1]evil.com`` parsed as ``[::1]`` (so it was allowed as a Host), and such
    entries were silently kept."""
    rule = HostRule.of([])
    assert not rule.allows("[::1]evil.com")
    assert not rule.allows("[::1]:80x")
    assert not rule.allows("127.0.0.1:0")
    assert split_host("[::1]evil.com") is None
    for bad in ("[::1]evil.com", "[not-ip]", "api.example:99999", "-bad.example", "a..b"):
        with pytest.raises(ConfigError, match="SUREHAND_API_ALLOWED_HOSTS"):
            HostRule.of([bad])
    assert HostRule.of(["worker_dev", "API.Example.com.", "[fd00::1]:8443"]).allows(
        "api.example.com."
    )


def test_short_tokens_are_refused_at_start() -> None:
    """Before: any token was accepted (a short one fell to 178 guesses)."""
    auth = Authenticator(Settings(api_tokens="pm=alice:PM:acme"))
    with pytest.raises(ConfigError, match="at least 16") as caught:
        auth.check_start("127.0.0.1", "the API")
    assert "alice" in caught.value.message
    assert "pm=" not in caught.value.message  # the token itself is never repeated
    Authenticator(Settings(api_tokens="a-long-enough-token=alice:PM:acme")).check_start(
        "0.0.0.0", "the API"
    )
