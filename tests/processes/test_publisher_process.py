"""``SUREHAND_API_PUBLISHER=process``: a real ``surehand api`` publishes created TASKs from a
child process woken through a pipe, each TASK once; a publisher killed is replaced and no TASK
waits for it; the publisher does not outlive its API."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis

from surehand.config import Settings
from surehand.dispatcher import publisher_process
from surehand.dispatcher.publisher_process import PublisherProcess
from surehand.store import Store
from tests.procs import Proc, RedisServer, free_port, private_redis, running, spawn, wait_until
from tests.shared.outbox import _answers, _session_messages, api_env, pending, published
from tests.submission_helpers import request

MODULE = "surehand.publisher_child"


@dataclass
class Api:
    proc: Proc
    port: int
    broker: RedisServer

    def create(self, sid: str) -> str:
        body = request(client_submission_id=sid)
        answer = httpx.post(f"http://127.0.0.1:{self.port}/v1/tasks", json=body, timeout=30)
        assert answer.status_code == 201, answer.text
        return str(answer.json()["task_id"])

    def messages(self) -> int:
        client = redis.Redis.from_url(self.broker.url)
        try:
            return _session_messages(client)
        finally:
            client.close()


@pytest.fixture
def api_process(store: Store, tmp_path: Path) -> Iterator[Api]:
    with private_redis(tmp_path) as server:
        env = api_env(store, server, publisher="process")
        port = free_port()
        with running(spawn(["api", "--port", str(port)], env, tmp_path / "api.log")) as proc:
            wait_until(lambda: _answers(port), timeout=60, what="the api")
            yield Api(proc, port, server)


def publishers_of(parent: int) -> list[int]:
    """The live publisher processes whose parent is ``parent``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue  # it ended while we looked
        if stat[0] != "Z" and int(stat[1]) == parent and MODULE.encode() in command:
            found.append(int(entry.name))
    return found


def one_publisher(api_process: Api) -> int:
    wait_until(lambda: len(publishers_of(api_process.proc.process.pid)) == 1, timeout=30, what="it")
    [pid] = publishers_of(api_process.proc.process.pid)
    return pid


def test_creates_are_published_once_each_by_the_child_process(
    store: Store, api_process: Api
) -> None:
    one_publisher(api_process)

    created = [api_process.create(f"process-{n}") for n in range(5)]

    wait_until(lambda: all(published(store, t) for t in created), timeout=30, what="publish")
    assert pending(store) == 0
    assert api_process.messages() == 5


def test_a_killed_publisher_is_replaced_and_no_create_waits_for_it(
    store: Store, api_process: Api
) -> None:
    first = one_publisher(api_process)
    os.kill(first, signal.SIGKILL)
    wait_until(
        lambda: publishers_of(api_process.proc.process.pid) == [], timeout=30, what="its end"
    )
    created = [api_process.create("after-the-kill")]

    # Each create finds the publisher gone: the API starts another (at most once a second,
    # so a create may find it not yet replaced and publish its TASK itself).
    def replaced() -> bool:
        if publishers_of(api_process.proc.process.pid):
            return True
        created.append(api_process.create(f"meanwhile-{len(created)}"))
        return False

    wait_until(replaced, timeout=30, interval=0.3, what="another publisher")
    wait_until(lambda: all(published(store, t) for t in created), timeout=30, what="publish")
    assert one_publisher(api_process) != first
    assert api_process.messages() == len(created)


def test_the_publisher_process_ends_with_its_api(api_process: Api) -> None:
    child = one_publisher(api_process)

    os.kill(api_process.proc.process.pid, signal.SIGKILL)  # the API alone, not its process group
    api_process.proc.process.wait(timeout=30)

    # The pipe's write end died with the API: the child reads end-of-file and exits.
    wait_until(lambda: not _alive(child), timeout=30, what="the publisher to end")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_publisher_process_that_cannot_start_leaves_each_create_to_publish_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_processes(*_args: object, **_kwargs: object) -> None:
        raise OSError(11, "Resource temporarily unavailable")

    publisher = PublisherProcess(Settings())
    monkeypatch.setattr("surehand.dispatcher.publisher_process.subprocess.Popen", no_processes)
    monkeypatch.setattr(publisher_process, "RESPAWN_SECONDS", 0.0)

    # False: after_create then drains the outbox in the creating process (never raises).
    assert publisher.wake() is False
    assert publisher.wake() is False
    publisher.stop()
