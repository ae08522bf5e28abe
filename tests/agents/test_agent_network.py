"""The agents' network, in one process: the egress allowlist, the gateway's proxy and relays
(real sockets, a real gateway thread), their caps and timeouts, and the portal. Under real
workers, ``surehand up`` and bubblewrap: tests/agents/test_agent_network_real.py."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import ipaddress
import json
import logging
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from surehand.agents import groups, relay
from surehand.agents.egress import Address, Allowlist, public
from surehand.agents.gateway import Gateway, SessionNet, SessionSpec
from surehand.agents.proxy import Proxy
from surehand.cli import app
from surehand.errors import ConfigError
from surehand.facade import Surehand
from surehand.store import Store
from tests.agent_procs import require_proc
from tests.agent_runtime import agent_user_env, session_ended, surehand_of
from tests.procs import RedisServer, running, start_worker, wait_until
from tests.session_helpers import committed_task, reports_of
from tests.shared.agent_network import Answering
from tests.skips import missing

PORTAL = Path(__file__).resolve().parents[2] / "surehand" / "agents" / "portal.py"

# -- the allowlist ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("127.0.0.1", "without a port"),
        ("localhost", "without a port"),
        ("[::1]", "without a port"),
        ("api.example.com:0", "no port between 1 and 65535"),
        ("api.example.com:http", "no port between 1 and 65535"),
        ("*.10.0.0.1", "is not a host name"),
        ("exa mple.com", "is not a host name"),
        ("[::1]x", "text after the bracketed address"),
    ],
)
def test_an_egress_entry_that_names_no_destination_is_a_config_error_naming_it(
    entry: str, why: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"EGRESS entry {entry!r} ") + f".*{why}"):
        Allowlist.parse(f"github.com,{entry}")


def test_the_allowlist_matches_names_suffixes_addresses_and_ports_and_presets_add_their_api() -> (
    None
):
    allowed = Allowlist.parse(
        "GitHub.com., *.pypi.org:443, 10.1.2.3, [2001:db8::1]:8443, 127.0.0.1:8080",
        command_agent="/opt/agents/bin/claude --verbose",
    )

    def rule(host: str, port: int) -> str | None:
        found = allowed.rule_for(host, port)
        return None if found is None else str(found)

    assert rule("github.com", 22) == "github.com"  # a name without a port: every port
    assert rule("api.github.com", 443) is None  # a name is that name only
    assert rule("files.pypi.org", 443) == "*.pypi.org:443"
    assert rule("pypi.org", 443) is None  # a suffix is not its own name
    assert rule("files.pypi.org", 80) is None
    assert rule("10.1.2.3", 5432) == "10.1.2.3"
    assert rule("[2001:db8:0::1]", 8443) == "[2001:db8::1]:8443"
    assert rule("127.0.0.1", 8080) == "127.0.0.1:8080"
    assert rule("127.0.0.1", 5432) is None
    assert rule("api.anthropic.com", 443) == "api.anthropic.com:443"  # the preset's
    assert allowed.loopback_forwards() == [("127.0.0.1", 8080)]
    assert Allowlist.parse("", command_agent="codex exec").describe() == "api.openai.com:443"


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.0.0.2",
        "10.0.0.1",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",  # cloud metadata
        "100.64.0.1",  # shared (carrier-grade NAT)
        "0.0.0.0",
        "224.0.0.251",  # multicast
        "255.255.255.255",
        "::1",
        "fe80::1",
        "fc00::1",
        "ff02::1",
        "::ffff:127.0.0.1",  # IPv4-mapped
        "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254
        "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
    ],
)
def test_loopback_private_link_local_multicast_and_their_ipv6_disguises_are_not_public(
    address: str,
) -> None:
    assert not public(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", ["1.1.1.1", "160.79.104.10", "2606:4700:4700::1111"])
def test_internet_addresses_are_public(address: str) -> None:
    assert public(ipaddress.ip_address(address))


# -- the gateway's proxy, with real sockets ----------------------------------------------------


@pytest.fixture
def destination() -> Iterator[tuple[str, int]]:
    """An HTTP server on 127.0.0.2 (not a name programs skip the proxy for)."""
    server = ThreadingHTTPServer(("127.0.0.2", 0), Answering)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield "127.0.0.2", int(server.server_address[1])
    server.shutdown()
    server.server_close()


def open_session(egress: str, **spec: Any) -> SessionNet:
    settings = {"mcp": None, "connections": 8, "idle": 30.0, **spec}
    return Gateway.shared().open_session(
        SessionSpec("TASK-20260101-001 attempt 1", egress=Allowlist.parse(egress), **settings)
    )


def socket_of(net: SessionNet, name: str) -> str:
    return str(net.directory / name)


def ask(path: str, request: bytes, *, read_all: bool = True) -> bytes:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(10)
        sock.connect(path)
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
            if not read_all:
                break
        return answer


def test_a_listed_destination_is_reached_through_the_proxy_by_plain_http_and_by_connect(
    destination: tuple[str, int],
) -> None:
    host, port = destination
    net = open_session(f"{host}:{port}")
    try:
        proxy = socket_of(net, "proxy")
        plain = ask(
            proxy,
            f"POST http://{host}:{port}/v1/messages?beta=true HTTP/1.1\r\nHost: evil.example\r\n"
            "Proxy-Connection: keep-alive\r\nContent-Length: 5\r\n\r\nhello".encode(),
        )
        with socket.socket(socket.AF_UNIX) as tunnel:
            tunnel.settimeout(10)
            tunnel.connect(proxy)
            tunnel.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            established = tunnel.recv(4096)
            tunnel.sendall(b"GET /through HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            tunneled = b"".join(iter(lambda: tunnel.recv(65536), b""))
    finally:
        net.close()

    head, _, body = plain.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert b"Connection: close" in head  # one request per connection: the client knows
    assert body == f"POST /v1/messages?beta=true hello Host: {host}:{port}".encode()
    assert established == b"HTTP/1.1 200 Connection Established\r\n\r\n"
    assert tunneled.endswith(b"GET /through")
    assert net.env["HTTPS_PROXY"] == net.env["http_proxy"] == "http://127.0.0.1:3128"
    assert net.env["NO_PROXY"] == "localhost,127.0.0.1,::1"
    assert not net.directory.exists()  # the session's sockets went with it


@pytest.mark.parametrize(
    ("request_line", "refused"),
    [
        ("CONNECT evil.example.net:443", "evil.example.net:443 is not in SUREHAND_AGENT_EGRESS"),
        ("GET http://169.254.169.254/latest/meta-data/", "169.254.169.254:80 is not in"),
        ("CONNECT 10.0.0.1:443", "10.0.0.1:443 is not in SUREHAND_AGENT_EGRESS"),
        ("CONNECT 127.0.0.1:5432", "127.0.0.1:5432 is not in SUREHAND_AGENT_EGRESS"),
        ("CONNECT [::ffff:127.0.0.1]:6379", "::ffff:7f00:1:6379 is not in"),
    ],
)
def test_an_unlisted_host_the_metadata_address_and_private_ones_are_refused_and_logged(
    request_line: str, refused: str, caplog: pytest.LogCaptureFixture
) -> None:
    net = open_session("api.anthropic.com:443,*.example.com:443")
    try:
        with caplog.at_level(logging.WARNING, logger="surehand.agents.proxy"):
            answer = ask(socket_of(net, "proxy"), f"{request_line} HTTP/1.1\r\n\r\n".encode())
    finally:
        net.close()

    assert answer.startswith(b"HTTP/1.1 403 Forbidden")
    assert refused in answer.decode()
    [record] = [r for r in caplog.records if refused in r.getMessage()]
    assert "TASK-20260101-001 attempt 1" in record.getMessage()


def fake_dns(answers: dict[str, str]) -> Any:
    async def resolve(host: str, _port: int) -> list[Address]:
        return [ipaddress.ip_address(answers[host])]

    return resolve


def test_a_wildcard_or_a_preset_never_admits_a_non_public_address_an_exact_entry_does(
    destination: tuple[str, int],
) -> None:
    host, port = destination
    dns = {"rebound.example.com": host, "api.anthropic.com": host, "build.internal": host}
    allowlist = Allowlist.parse(f"*.example.com,build.internal:{port}", command_agent="claude")

    async def status(target: str) -> bytes:
        server = await asyncio.start_unix_server(
            Proxy(allowlist, "TASK-1 attempt 1", 30, resolver=fake_dns(dns)).serve, path=sock
        )
        async with server:
            reader, writer = await asyncio.open_unix_connection(sock)
            writer.write(f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
            line = await reader.readline()
            writer.close()
            return line

    sock = str(Path(Gateway.shared().root) / f"test-{time.monotonic_ns()}.sock")
    assert asyncio.run(status(f"rebound.example.com:{port}")).startswith(b"HTTP/1.1 403")
    assert asyncio.run(status("api.anthropic.com:443")).startswith(b"HTTP/1.1 403")
    assert asyncio.run(status(f"build.internal:{port}")).startswith(b"HTTP/1.1 200")


# -- caps and timeouts -----------------------------------------------------------------------


@contextlib.contextmanager
def unix_server(path: Path, answer: Callable[[socket.socket], None]) -> Iterator[Path]:
    """A Unix socket at ``path``, each connection answered by ``answer`` in a thread."""
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen(64)

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield path
    finally:
        listener.close()


def answer_ok(conn: socket.socket) -> None:
    with conn:
        data = b""
        while b"\r\n\r\n" not in data and (chunk := conn.recv(4096)):
            data += chunk
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")


@pytest.fixture
def session_server(tmp_path: Path) -> Iterator[Path]:
    """A stand-in for the session MCP server's Unix socket: answers ``ok`` to each request."""
    with unix_server(tmp_path / "mcp.sock", answer_ok) as path:
        yield path


def test_one_sessions_flood_holds_its_own_cap_while_a_sibling_is_answered(
    session_server: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(relay, "HEAD_SECONDS", 1.0)
    spec = {"connections": 4, "mcp": (41000, session_server)}
    flooder, sibling = open_session("", **spec), open_session("", **spec)
    request = b"POST /tasks/T/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    held = []
    try:
        for _ in range(20):  # half-sent heads, never finished
            sock = socket.socket(socket.AF_UNIX)
            sock.connect(socket_of(flooder, "mcp"))
            sock.sendall(b"POST /tasks/T/mcp HTTP/1.1\r\nHost: 127.")
            held.append(sock)
        wait_until(lambda: flooder.budget.held == 4, timeout=10, what="the flood to be taken in")
        answered_sibling = ask(socket_of(sibling, "mcp"), request)
        # Each head's deadline drops its connection and takes in one that waited, until all
        # twenty are gone: the flood never held more than its four at once.
        wait_until(lambda: all(map(_closed, held)), timeout=60, what="every head to expire")
    finally:
        for sock in held:
            sock.close()
        flooder.close()
        sibling.close()

    assert answered_sibling.endswith(b"\r\n\r\nok")
    assert (flooder.budget.most, sibling.budget.most) == (4, 1)


def _closed(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_a_request_head_over_64_kib_is_dropped_unanswered() -> None:
    net = open_session("api.anthropic.com:443")
    try:
        head = b"CONNECT api.anthropic.com:443 HTTP/1.1\r\nX-Pad: " + b"a" * 70_000
        answer = ask(socket_of(net, "proxy"), head)
    finally:
        net.close()

    assert answer == b""


def test_a_connection_idle_past_its_limit_is_closed(destination: tuple[str, int]) -> None:
    host, port = destination
    net = open_session(f"{host}:{port}", idle=0.5)
    try:
        with socket.socket(socket.AF_UNIX) as tunnel:
            tunnel.settimeout(10)
            tunnel.connect(socket_of(net, "proxy"))
            tunnel.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\n\r\n".encode())
            assert tunnel.recv(4096).startswith(b"HTTP/1.1 200")
            started = time.monotonic()
            assert tunnel.recv(1) == b""  # nothing moved: the gateway closed it
            waited = time.monotonic() - started
    finally:
        net.close()
    assert waited < 9  # closed by the idle limit, not by the socket's own timeout


def test_the_session_servers_port_serves_at_most_its_cap_at_once(
    session_server: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(relay, "HEAD_SECONDS", 30.0)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    stop = Gateway.shared().listen(
        listener, session_server, connections=3, idle=30.0, owner="the test's port"
    )
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as fourth:
            fourth.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            with pytest.raises(TimeoutError):
                fourth.recv(100)  # waits, unaccepted, while three hold the port
            held.pop().close()  # one ends: the fourth is taken in and answered
            fourth.settimeout(10)
            assert fourth.recv(100).endswith(b"ok")
    finally:
        for sock in held:
            sock.close()
        stop()


# -- the portal -------------------------------------------------------------------------------


def test_the_portal_relays_both_ways_passes_each_end_on_and_then_runs_the_program(
    tmp_path: Path, session_server: Path
) -> None:
    program = (
        "import socket\n"
        "s = socket.create_connection(('127.0.0.1', 47231))\n"
        "s.sendall(b'GET / HTTP/1.1\\r\\n' + b'x' * 300000 + b'\\r\\n\\r\\n')\n"
        "s.shutdown(socket.SHUT_WR)\n"
        "print(b''.join(iter(lambda: s.recv(65536), b'')).decode())\n"
    )
    portal = [sys.executable, "-I", "-S", str(PORTAL), "--forward"]
    forward = f"127.0.0.1:47231={session_server}"
    done = in_a_sandbox([*portal, forward, "--", sys.executable, "-c", program])

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("ok")


def in_a_sandbox(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as a session's program runs: in a network and PID namespace of its own
    (so a portal's forwarder dies with it)."""
    binary = shutil.which("bwrap")
    if binary is None:
        missing("bwrap (bubblewrap)")
    sandbox = [binary, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    namespaces = ["--unshare-pid", "--unshare-net", "--die-with-parent", "--"]
    return subprocess.run(
        [*sandbox, *namespaces, *argv], capture_output=True, text=True, timeout=300, check=False
    )


# -- what surehand check says ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("network", "status", "says"),
    [("egress", "ok", "egress: a namespace of its own"), ("host", "warn", "WARNING")],
)
def test_surehand_check_says_what_the_agents_network_reaches(
    tmp_path: Path, network: str, status: str, says: str
) -> None:
    env = {
        "SUREHAND_HOME": str(tmp_path),
        "SUREHAND_AGENTS": "DEV=command",
        "SUREHAND_COMMAND_AGENT": "my-agent",
        "SUREHAND_AGENT_NETWORK": network,
        "SUREHAND_AGENT_EGRESS": "github.com",
    }

    done = CliRunner().invoke(app, ["check", "--json"], env=env)

    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["agent network"]["status"] == status
    assert says in checks["agent network"]["detail"]


# -- the end of a sandbox with a portal -----------------------------------------------------


def test_a_stop_looks_again_within_a_millisecond_then_backs_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A sandbox's portal, killed with its namespace, can still be listed in the session's
    cgroup as the group's end is looked at: the stop then waited a whole 50 ms poll for it
    (bench/agents/sandbox.py's p90 for the network modes)."""
    pauses: list[float] = []
    monkeypatch.setattr("surehand.agents.groups.time.sleep", pauses.append)
    answers = iter([False] * 8 + [True])

    assert groups.wait_for(lambda: next(answers), timeout=10)
    assert pauses == [0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.05, 0.05]


# -- as another user ---------------------------------------------------------------------------

AS_ANOTHER_USER = """\
import json, os, urllib.request
call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
headers = {
    "Authorization": "Bearer " + os.environ["SUREHAND_MCP_TOKEN"],
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
}
asked = urllib.request.Request(os.environ["SUREHAND_MCP_URL"], json.dumps(call).encode(), headers)
print(urllib.request.urlopen(asked, timeout=10).status)
print(urllib.request.urlopen(os.environ["TARGET"], timeout=10).read().decode())
"""


def test_an_agent_user_reaches_its_session_server_and_a_listed_host_through_its_own_sockets(
    store: Store,
    broker: RedisServer,
    client: Surehand,
    agent_runtime: Path,
    destination: tuple[str, int],
    tmp_path: Path,
) -> None:
    """The session's sockets are the agent user's (its directory 0700, chowned), and the
    portal runs for it on the worker's interpreter, which it can reach (a worker whose
    interpreter it cannot reach refuses to start: tests/agents/test_agent_confinement.py)."""
    require_proc()
    host, port = destination
    work_dir = Path(tempfile.mkdtemp(dir="/var/tmp"))  # pytest's directories are root's alone
    work_dir.chmod(0o711)
    (work_dir / "agent.py").write_text(AS_ANOTHER_USER)
    (work_dir / "agent.py").chmod(0o644)
    env = agent_user_env(
        store,
        broker,
        tmp_path,
        work_dir / "sessions",
        SUREHAND_COMMAND_AGENT=f"/usr/bin/python3 -I {work_dir / 'agent.py'}",
        SUREHAND_AGENT_SANDBOX="bwrap",
        SUREHAND_AGENT_EGRESS=f"{host}:{port}",
        SUREHAND_AGENT_BIND=f"{work_dir / 'agent.py'}:ro",
        SUREHAND_AGENT_ENV="TARGET",
        TARGET=f"http://{host}:{port}/for-the-agent-user",
    )
    try:
        log = tmp_path / "worker.log"
        with running(start_worker(env, log, surehand=surehand_of(agent_runtime))) as worker:
            task_id = committed_task(client)
            ended = functools.partial(session_ended, store, task_id)
            wait_until(ended, timeout=90, what="the session to end")
            output = worker.output()
    finally:
        shutil.rmtree(work_dir)

    [report] = reports_of(store, task_id)
    assert report.body.splitlines() == ["200", "GET /for-the-agent-user"], output[-3000:]


# -- every byte once ----------------------------------------------------------------------------

CLIENTS = """\
import hashlib, random, socket, threading
wrong = []
def client(number):
    rnd = random.Random(number)
    with socket.create_connection(("127.0.0.1", 47232)) as sock:
        answers = sock.makefile("rb")
        for _ in range(3):  # one connection, kept alive
            body = rnd.randbytes(rnd.randint(0, 200_000))
            sock.sendall(b"POST / HTTP/1.1\\r\\nContent-Length: %d\\r\\n\\r\\n" % len(body) + body)
            answers.readline()
            length = int(answers.readline().split(b":")[1])
            answers.readline()
            if answers.read(length) != hashlib.sha256(body).hexdigest().encode() + body[::-1]:
                wrong.append(number)
threads = [threading.Thread(target=client, args=(n,)) for n in range(20)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(len(wrong), "wrong")
"""


def answer_digest(conn: socket.socket) -> None:
    with conn, conn.makefile("rb") as requests:
        while requests.readline():
            length = int(requests.readline().split(b":")[1])
            requests.readline()
            body = requests.read(length)
            answer = hashlib.sha256(body).hexdigest().encode() + body[::-1]
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(answer) + answer)


@pytest.fixture
def digesting_server(tmp_path: Path) -> Iterator[Path]:
    """Answers each request with its body's SHA-256 and the body reversed (keep-alive)."""
    with unix_server(tmp_path / "digest.sock", answer_digest) as path:
        yield path


def test_the_portal_and_the_gateway_carry_every_byte_once_in_order_both_ways(
    digesting_server: Path,
) -> None:
    """Twenty programs' connections at once through a session capped at four: the rest wait
    their turn, and every request and answer arrives whole, once."""
    net = open_session("", connections=4, mcp=(47232, digesting_server))
    forwards = [arg for forward in net.forwards for arg in ("--forward", forward.argument())]
    portal = [sys.executable, "-I", "-S", str(net.portal), *forwards, "--"]
    try:
        done = in_a_sandbox([*portal, sys.executable, "-c", CLIENTS])
    finally:
        net.close()

    assert (done.returncode, done.stdout.strip()) == (0, "0 wrong"), done.stderr
    assert net.budget.most == 4
