"""The built-in http.request and github.pull_request probes against a local fake API."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from surehand.agents.egress import Allowlist, Rule
from surehand.agents.probes import builtin_probes, check_probe_args
from surehand.agents.probes.args import HttpRequestArgs, PullRequestArgs
from surehand.agents.probes.fetch import Destinations
from surehand.agents.probes.github_pr import PullRequestProbe
from surehand.agents.probes.http_request import HttpRequestProbe, parse_credentials
from surehand.config import Settings
from tests.fake_forge import FakeApi, serve


@pytest.fixture
def fake_api() -> Iterator[FakeApi]:
    with serve(FakeApi(tickets={"EXT-1": {"id": 7, "external_id": "EXT-1"}})) as running:
        yield running


def allowing(fake_api: FakeApi) -> Destinations:
    return Destinations(Allowlist.parse(f"127.0.0.1:{fake_api.port}"))


def probe_for(fake_api: FakeApi, **options: Any) -> HttpRequestProbe:
    return HttpRequestProbe(allowing(fake_api), **{"timeout": 5.0, **options})


def ask(probe: HttpRequestProbe, **args: Any) -> tuple[bool | None, dict[str, Any]]:
    result = probe.check(HttpRequestArgs(**args))
    return result.present, dict(result.saw)


def test_a_ticket_with_the_external_id_is_present(fake_api: FakeApi) -> None:
    url = f"{fake_api.base}/tickets?external_id=EXT-1"
    present, saw = ask(probe_for(fake_api), url=url, field="items.0.external_id", equals="EXT-1")
    assert present is True
    assert saw == {"url": url, "status": 200, "field": "items.0.external_id", "value": "EXT-1"}


def test_an_empty_search_is_absent_and_a_404_is_absent(fake_api: FakeApi) -> None:
    search = f"{fake_api.base}/tickets?external_id=EXT-2"
    assert ask(probe_for(fake_api), url=search, field="items")[0] is False
    present, saw = ask(probe_for(fake_api), url=f"{fake_api.base}/tickets/EXT-2")
    assert (present, saw["status"]) == (False, 404)


def test_a_field_that_differs_is_absent_and_a_number_given_as_text_matches(
    fake_api: FakeApi,
) -> None:
    url = f"{fake_api.base}/tickets/EXT-1"
    assert ask(probe_for(fake_api), url=url, field="id", equals=8)[0] is False
    assert ask(probe_for(fake_api), url=url, field="id", equals="7")[0] is True


def test_a_server_error_is_inconclusive(fake_api: FakeApi) -> None:
    fake_api.status = 503
    present, saw = ask(probe_for(fake_api), url=f"{fake_api.base}/tickets/EXT-1")
    assert present is None
    assert saw["status"] == 503


def test_an_answer_that_does_not_come_in_time_is_inconclusive(fake_api: FakeApi) -> None:
    fake_api.stall_seconds = 3.0
    present, saw = ask(probe_for(fake_api, timeout=0.5), url=f"{fake_api.base}/tickets/EXT-1")
    assert present is None
    assert saw["why"].startswith("no answer")


def test_an_answer_dripped_a_byte_at_a_time_cannot_hold_the_probe_past_its_bound(
    fake_api: FakeApi,
) -> None:
    fake_api.drip_seconds = 0.3  # each byte well inside the socket timeout, the whole far past it
    present, saw = ask(probe_for(fake_api, timeout=1.0), url=f"{fake_api.base}/tickets/EXT-1")
    assert present is None
    assert saw["why"].startswith("no answer")


@dataclass
class Dripping:
    port: int = 0
    sent_all: bool = False  # the client stayed for every byte


@contextmanager
def dripping_headers(pause: float) -> Iterator[Dripping]:
    """A server whose answer's headers come a byte at a time, ``pause`` apart (a 200 in the
    end): each byte inside a socket timeout, all of them far past a probe's bound. It stops
    when the client hangs up."""
    listener = socket.create_server(("127.0.0.1", 0))
    state = Dripping(listener.getsockname()[1])

    def answer() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            head = b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 30 + b"\r\nContent-Length: 2\r\n\r\n"
            for byte in head:
                try:
                    connection.sendall(bytes([byte]))
                except OSError:
                    return
                time.sleep(pause)
            state.sent_all = True

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        thread.join(timeout=60)
        listener.close()


def test_headers_dripped_a_byte_at_a_time_cannot_hold_the_probe_past_its_bound() -> None:
    with dripping_headers(0.3) as server:
        listed = Destinations(Allowlist.parse(f"127.0.0.1:{server.port}"))
        probe = HttpRequestProbe(listed, timeout=1.0)
        present, saw = ask(probe, url=f"http://127.0.0.1:{server.port}/tickets/EXT-1")
    assert present is None
    assert saw["why"].startswith("no answer")
    assert not server.sent_all  # the probe hung up at its bound, not after every header


def test_the_workers_loopback_is_refused_unless_an_entry_names_it(fake_api: FakeApi) -> None:
    url = f"{fake_api.base}/tickets/EXT-1"
    for destinations in (
        Destinations(Allowlist.parse("")),
        Destinations(Allowlist.parse("*.example.com")),
        Destinations(Allowlist.parse("127.0.0.1:1")),
    ):
        result = HttpRequestProbe(destinations, timeout=5).check(HttpRequestArgs(url=url))
        assert result.present is None
        assert result.saw["why"].startswith("refused")
    assert fake_api.seen == []  # nothing reached the server
    allowed = HttpRequestProbe(allowing(fake_api), timeout=5).check(HttpRequestArgs(url=url))
    assert allowed.present is True


def test_a_name_that_resolves_to_loopback_is_refused_by_an_entry_for_public_addresses(
    fake_api: FakeApi,
) -> None:
    # What a wildcard or a preset's model API admits: public addresses only.
    destinations = Destinations(Allowlist((Rule("localhost", fake_api.port, public_only=True),)))
    result = HttpRequestProbe(destinations, timeout=5).check(
        HttpRequestArgs(url=f"http://localhost:{fake_api.port}/tickets/EXT-1")
    )
    assert result.present is None
    assert "non-public address" in result.saw["why"]
    assert fake_api.seen == []


def test_credentials_come_only_from_a_variable_the_operator_lists(fake_api: FakeApi) -> None:
    url = f"{fake_api.base}/tickets/EXT-1"
    environ = {"TICKETS_TOKEN": "s3cret", "OTHER": "leak"}
    credentials = parse_credentials(f"TICKETS_TOKEN@127.0.0.1:{fake_api.port}")
    listed = probe_for(fake_api, credentials=credentials, environ=environ)
    assert ask(listed, url=url, auth_env="TICKETS_TOKEN")[0] is True
    assert fake_api.seen[-1]["Authorization"] == "Bearer s3cret"
    present, saw = ask(listed, url=url, auth_env="OTHER")
    assert present is None
    assert "SUREHAND_PROBE_CREDENTIALS" in saw["why"]
    assert all(headers.get("Authorization") != "Bearer leak" for headers in fake_api.seen)


def test_a_credential_goes_only_to_the_host_it_is_bound_to_not_to_one_the_agent_names(
    fake_api: FakeApi,
) -> None:
    """An agent declares an http.request to a server of its own that egress allows, naming
    the operator's ticket token: the worker must not send it there."""
    environ = {"TICKETS_TOKEN": "s3cret"}
    with serve(FakeApi()) as agents_server:
        both = Allowlist.parse(f"127.0.0.1:{fake_api.port},127.0.0.1:{agents_server.port}")
        credentials = parse_credentials(f"TICKETS_TOKEN@127.0.0.1:{fake_api.port}")
        probe = HttpRequestProbe(Destinations(both), credentials, 5.0, environ)
        present, saw = ask(probe, url=f"{agents_server.base}/x", auth_env="TICKETS_TOKEN")
        assert present is None
        assert f"TICKETS_TOKEN@127.0.0.1:{agents_server.port}" in saw["why"]
        assert agents_server.seen == []
        assert ask(probe, url=f"{fake_api.base}/tickets/EXT-1", auth_env="TICKETS_TOKEN")[0] is True
        assert fake_api.seen[-1]["Authorization"] == "Bearer s3cret"


def test_a_credential_named_without_its_host_is_sent_nowhere(fake_api: FakeApi) -> None:
    environ = {"TICKETS_TOKEN": "s3cret"}
    probe = probe_for(fake_api, credentials=parse_credentials("TICKETS_TOKEN"), environ=environ)
    present, saw = ask(probe, url=f"{fake_api.base}/tickets/EXT-1", auth_env="TICKETS_TOKEN")
    assert present is None
    assert "TICKETS_TOKEN@" in saw["why"]
    assert fake_api.seen == []


def test_a_bound_credential_without_a_port_is_sent_over_https_only() -> None:
    assert parse_credentials("A@tickets.example.com, B@[::1]:8443") == {
        "A": frozenset({"https://tickets.example.com:443"}),
        "B": frozenset({"http://::1:8443", "https://::1:8443"}),
    }


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"url": "file:///etc/passwd"}, "url"),
        ({"url": "http://user:pw@example.com/"}, "url"),
        ({"url": "https://example.com/", "status": "ok"}, "status"),
        ({"url": "https://example.com/", "auth_env": "lower case"}, "auth_env"),
        ({"url": "https://example.com/", "method": "POST"}, "method"),
    ],
)
def test_bad_arguments_are_refused_naming_the_field(args: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field}"):
        check_probe_args("http.request", args)


def test_a_pull_request_from_the_head_branch_is_present_on_the_fake_forge(
    fake_api: FakeApi,
) -> None:
    fake_api.pulls.append(("acme/app", "surehand/TASK-1", "https://forge/acme/app/pull/1"))
    probe = PullRequestProbe(
        fake_api.base, Destinations(Allowlist.parse(""), (f"127.0.0.1:{fake_api.port}",))
    )
    found = probe.check(PullRequestArgs(repo="acme/app", head="surehand/TASK-1"))
    assert (found.present, found.saw["pull_request"]) == (True, "https://forge/acme/app/pull/1")
    assert probe.check(PullRequestArgs(repo="acme/app", head="other")).present is False
    fake_api.status = 502
    assert probe.check(PullRequestArgs(repo="acme/app", head="other")).present is None


@pytest.mark.parametrize("repo", ["../..", "acme/..", "./app", "acme/."])
def test_a_repo_that_would_walk_the_forges_api_path_is_refused(repo: str) -> None:
    """``/repos/../../x`` is another endpoint of the forge, asked with the operator's token."""
    with pytest.raises(ValueError, match=r"^repo"):
        check_probe_args("github.pull_request", {"repo": repo, "head": "x"})


def test_every_built_in_probe_is_made_from_settings_alone() -> None:
    made = builtin_probes(Settings(database_url="sqlite://", redis_url="memory://"))
    assert sorted(made) == ["git.push", "github.pull_request", "http.request"]


def test_an_unknown_name_in_a_built_in_namespace_is_refused() -> None:
    with pytest.raises(ValueError, match="no built-in probe"):
        check_probe_args("git.pull", {})
    assert check_probe_args("ledger", {"anything": 1}) == {"anything": 1}
    with pytest.raises(ValueError, match="need a probe"):
        check_probe_args(None, {"ref": "main"})
