"""The built-in git.push probe against real remotes: file://, a local git daemon, none."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from surehand.agents.egress import Allowlist
from surehand.agents.probes import check_probe_args
from surehand.agents.probes.args import GitPushArgs
from surehand.agents.probes.fetch import Destinations
from surehand.agents.probes.git_push import GitPushProbe, network_destination
from tests.fake_forge import FakeApi, serve
from tests.git_remotes import Remote, git, git_daemon, plant_hooks

ZERO = "0" * 40


@contextmanager
def redirecting(target: str) -> Iterator[int]:
    """A server on the loopback that answers every GET with a redirect to ``target``."""

    class Redirect(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(302)
            self.send_header("Location", target + self.path.partition("/x.git")[2])
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def ask(url: str, ref: str, commit: str) -> tuple[bool | None, dict[str, object]]:
    """The probe, with egress listing the URL's own host and port (a local git daemon's)."""
    where = url.removeprefix("git://").partition("/")[0] if url.startswith("git://") else ""
    probe = GitPushProbe(20, Destinations(Allowlist.parse(where)))
    result = probe.check(GitPushArgs(remote=url, ref=ref, commit=commit))
    return result.present, dict(result.saw)


def test_a_pushed_commit_is_present_and_the_remote_ref_is_what_it_saw(remote: Remote) -> None:
    head = git(remote.work, "rev-parse", "HEAD")
    present, saw = ask(remote.url, "main", head)
    assert present is True
    assert saw["remote_ref"] == head
    assert saw["ref"] == "refs/heads/main"


def test_a_commit_the_remote_ref_moved_past_is_still_present(remote: Remote) -> None:
    pushed = git(remote.work, "rev-parse", "HEAD")
    remote.commit("second")
    remote.push()
    present, saw = ask(remote.url, "refs/heads/main", pushed)
    assert present is True
    assert saw["contains"] == "yes"


def test_a_commit_not_pushed_is_absent_from_a_remote_that_answers(remote: Remote) -> None:
    unpushed = remote.commit("never pushed")
    present, saw = ask(remote.url, "main", unpushed)
    assert present is False
    assert saw["contains"] == "no"


def test_a_ref_the_remote_does_not_have_is_absent(remote: Remote) -> None:
    head = git(remote.work, "rev-parse", "HEAD")
    present, saw = ask(remote.url, "feature", head)
    assert present is False
    assert saw["remote_ref"] == "(absent)"


def test_an_unreachable_remote_is_inconclusive(tmp_path: Path) -> None:
    assert ask((tmp_path / "gone.git").as_uri(), "main", ZERO)[0] is None
    assert ask("git://127.0.0.1:9/nothing.git", "main", ZERO)[0] is None


def test_the_probe_answers_over_a_git_daemon(remote: Remote) -> None:
    head = git(remote.work, "rev-parse", "HEAD")
    unpushed = remote.commit("local only")
    with git_daemon(remote.bare.parent) as base:
        assert ask(f"{base}/remote.git", "main", head)[0] is True
        assert ask(f"{base}/remote.git", "main", unpushed)[0] is False
    assert ask(f"{base}/remote.git", "main", head)[0] is None  # the daemon is gone


def test_a_hook_planted_in_the_remote_never_runs_in_the_probe(
    remote: Remote, tmp_path: Path
) -> None:
    marker = tmp_path / "hook-ran"
    plant_hooks(remote.bare, marker)
    pushed = git(remote.work, "rev-parse", "HEAD")
    remote.commit("second")
    remote.push()  # the remote's ref moves on: the probe fetches it into a scratch repository
    marker.unlink(missing_ok=True)  # the test's own push ran them; the probe must not

    assert ask(remote.url, "main", pushed)[0] is True
    assert ask(remote.url, "main", remote.commit("unpushed"))[0] is False
    assert not marker.exists()


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"remote": "ext::sh -c touch% /tmp/x", "ref": "main", "commit": ZERO}, "remote"),
        ({"remote": "--upload-pack=touch /tmp/x", "ref": "main", "commit": ZERO}, "remote"),
        ({"remote": "relative/path", "ref": "main", "commit": ZERO}, "remote"),
        ({"remote": "file:///r.git", "ref": "main..x", "commit": ZERO}, "ref"),
        ({"remote": "file:///r.git", "ref": "main", "commit": "HEAD"}, "commit"),
        ({"remote": "file:///r.git", "ref": "main"}, "commit"),
        ({"remote": "file:///r.git", "ref": "main", "commit": ZERO, "hook": "x"}, "hook"),
    ],
)
def test_arguments_that_could_run_a_program_or_are_not_a_push_are_refused(
    args: dict[str, str], field: str
) -> None:
    with pytest.raises(ValueError, match=f"^{field}: "):
        check_probe_args("git.push", args)


def test_a_short_branch_name_is_recorded_as_its_full_ref() -> None:
    checked = check_probe_args("git.push", {"remote": "/srv/r.git", "ref": "main", "commit": ZERO})
    assert checked == {"remote": "/srv/r.git", "ref": "refs/heads/main", "commit": ZERO}


def test_an_agents_remote_on_the_workers_loopback_is_refused_before_git_connects() -> None:
    """An agent declares git.push at an address only the worker reaches: the probe runs
    outside the sandbox, so it must not send git's request there."""
    with serve(FakeApi()) as loopback_service:
        for remote in (
            f"http://127.0.0.1:{loopback_service.port}/x.git",
            f"http://localhost:{loopback_service.port}/x.git",
            f"https://[::ffff:127.0.0.1]:{loopback_service.port}/x.git",
        ):
            result = GitPushProbe(timeout=5).check(
                GitPushArgs(remote=remote, ref="main", commit=ZERO)
            )
            assert result.present is None
            assert "refused" in result.saw["why"]
        assert loopback_service.seen == []


def test_a_loopback_remote_is_asked_when_egress_names_it_or_it_is_the_repositorys(
    remote: Remote,
) -> None:
    head = git(remote.work, "rev-parse", "HEAD")
    with git_daemon(remote.bare.parent) as base:
        url = f"{base}/remote.git"
        listed = Destinations(Allowlist.parse(url.removeprefix("git://").partition("/")[0]))
        assert (
            GitPushProbe(5, listed).check(GitPushArgs(remote=url, ref="main", commit=head)).present
        )
        trusted = GitPushProbe(5, trusted=lambda: {url})
        assert trusted.check(GitPushArgs(remote=url, ref="main", commit=head)).present is True
        assert (
            GitPushProbe(5).check(GitPushArgs(remote=url, ref="main", commit=head)).present is None
        )


@pytest.mark.parametrize(
    ("remote", "destination"),
    [
        ("file:///srv/x.git", None),
        ("/srv/x.git", None),
        ("dir/x:y", None),
        ("git@example.com:acme/app.git", ("ssh", "example.com", 22)),
        ("[::1]:app.git", ("ssh", "::1", 22)),
        ("ssh://git@example.com:2222/app.git", ("ssh", "example.com", 2222)),
        ("git://10.0.0.1/app.git", ("git", "10.0.0.1", 9418)),
    ],
)
def test_where_a_remote_goes_over_the_network(
    remote: str, destination: tuple[str, str, int] | None
) -> None:
    assert network_destination(remote) == destination


def test_git_follows_no_redirect_from_an_allowed_remote_to_the_workers_loopback() -> None:
    """An allowed http remote answers with a redirect to an address only the worker reaches:
    git must not follow it (git follows a first redirect by default)."""
    with serve(FakeApi()) as hidden, redirecting(f"{hidden.base}/x.git") as allowed_port:
        listed = Destinations(Allowlist.parse(f"127.0.0.1:{allowed_port}"))
        remote = f"http://127.0.0.1:{allowed_port}/x.git"
        result = GitPushProbe(5, listed).check(GitPushArgs(remote=remote, ref="main", commit=ZERO))
        assert result.present is None
        assert hidden.seen == []
