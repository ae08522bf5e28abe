"""The compose stack under podman, as compose/check drives it: podman-compose for the
containers, the published API and Flower ports for HTTP, ``podman exec`` for the CLI inside a
container, and the effect ledger on the host directory every worker container shares.

Stdlib only: it runs on the host's python3 without surehand installed.

podman 4.3 without systemd needs two things done by hand that Docker (or podman >= 4.6 under
systemd) does itself: health checks are not scheduled (``podman healthcheck run`` runs one), and
podman-compose ignores ``condition: service_healthy`` and its ``--requires`` links break
``podman start`` of a service whose dependency has dependencies of its own. So the stack is
started with ``--no-deps`` in the compose file's order, waiting for each condition here.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

EXIT_RETRY = 75  # the CLI's EX_TEMPFAIL: retry the same call later

HERE = Path(__file__).resolve().parent
COMPOSE = HERE.parent
FILES = (
    COMPOSE / "docker-compose.yml",
    COMPOSE / "docker-compose.podman.yml",
    HERE / "compose.yml",
)
T = TypeVar("T")


class CheckFailed(AssertionError):
    """A scenario did not show what it must."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def say(name: str, detail: str) -> None:
    """A scenario's one line: what it showed, with what it measured."""
    print(f"check: {name}: ok ({detail})", flush=True)


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, every: float = 1.0) -> T:
    """``probe()``'s first truthy answer, or CheckFailed naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() > deadline:
            raise CheckFailed(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


@dataclass
class Stack:
    """One compose project under podman, with the settings compose/check gives it."""

    project: str
    podman_compose: str
    workdir: Path
    token: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    flower_auth: str = field(default_factory=lambda: "check:" + secrets.token_urlsafe(12))
    api_port: int = field(default_factory=free_port)
    flower_port: int = field(default_factory=free_port)
    # The compose file has no default passwords: generated for each run, as the guide says.
    postgres_password: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    redis_password: str = field(default_factory=lambda: secrets.token_urlsafe(24))

    @property
    def ledger_path(self) -> Path:
        return self.workdir / "ledger" / "effects.jsonl"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            CONTAINERS_CONF=str(COMPOSE / "images" / "containers.conf"),
            CHECK_LEDGER_DIR=str(self.ledger_path.parent),
            SUREHAND_API_TOKENS=f"{self.token}=check:ADMIN:default",
            SUREHAND_METRICS_TOKEN=secrets.token_urlsafe(24),
            FLOWER_BASIC_AUTH=self.flower_auth,
            POSTGRES_PASSWORD=self.postgres_password,
            REDIS_PASSWORD=self.redis_password,
            # QA: the hostile probe (check.d/probe_agent.py) as a command agent, sandboxed.
            SUREHAND_AGENTS="DEV=ledger_agent:ledger,QA=command,OPS=demo",
            SUREHAND_API_PORT=str(self.api_port),
            FLOWER_PORT=str(self.flower_port),
            # Short leases: a lost worker is found in seconds, not the default's ~50 s.
            SUREHAND_LEASE_TTL_SECONDS="6",
            SUREHAND_HEARTBEAT_SECONDS="2",
            SUREHAND_LOST_GRACE_SECONDS="3",
            SUREHAND_RECONCILE_INTERVAL_SECONDS="2",
            SUREHAND_REPUBLISH_AFTER_SECONDS="20",
        )
        return env

    # -- processes ---------------------------------------------------------------------------

    def compose(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        files = [arg for path in FILES for arg in ("-f", str(path))]
        argv = [self.podman_compose, "-p", self.project, *files, *args]
        return _run(argv, self.env(), check=check)

    def podman(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return _run(["podman", *args], self.env(), check=check)

    def teardown(self) -> None:
        """Remove every container, volume and network of the project: ``down`` knows only the
        compose file's own scale, not the containers ``--scale`` added."""
        self.compose("down", "-v", "-t", "10", check=False)
        label = f"label=com.docker.compose.project={self.project}"
        left = self.podman("ps", "-a", "-q", "--filter", label).stdout.split()
        if left:
            self.podman("rm", "-f", "-v", "-t", "5", *left, check=False)
        volumes = self.podman("volume", "ls", "-q", "--filter", label).stdout.split()
        if volumes:
            self.podman("volume", "rm", "-f", *volumes, check=False)
        self.podman("network", "rm", "-f", f"{self.project}_default", check=False)

    def containers(self, service: str, *, running: bool = True) -> list[str]:
        """Names of the service's containers, in container-number order."""
        labels = [
            f"--filter=label=com.docker.compose.project={self.project}",
            f"--filter=label=com.docker.compose.service={service}",
        ]
        listed = self.podman("ps", *([] if running else ["-a"]), *labels, "--format", "{{.Names}}")
        return sorted(listed.stdout.split(), key=lambda name: int(name.rsplit("_", 1)[-1]))

    def container_id(self, name: str) -> str:
        """The short id, which is the container's hostname (and a worker's node name)."""
        return self.podman("inspect", name, "--format", "{{.Id}}").stdout.strip()[:12]

    def healthy(self, name: str) -> bool:
        """Run the container's health check once (podman 4.3 has no scheduler without systemd)."""
        return self.podman("healthcheck", "run", name, check=False).returncode == 0

    def health(self, name: str) -> str:
        return self.podman("inspect", name, "--format", "{{.State.Health.Status}}").stdout.strip()

    def cli(self, *args: str, attempts: int = 5) -> Any:
        """``surehand ARGS --json`` inside the API container (the CLI where the stack runs).

        Exit 75 is the CLI's "retry later" (the store was unreachable or busy for a moment, as
        right after a container is killed): retried, as its users are told to; any other
        failure, or 75 every time, fails the check with the CLI's own answer."""
        api = self.containers("api")[0]
        for attempt in range(attempts):
            done = self.podman("exec", api, "surehand", *args, "--json", check=False)
            if done.returncode != EXIT_RETRY or attempt == attempts - 1:
                break
            time.sleep(1 + attempt)
        if done.returncode != 0:
            raise CheckFailed(
                f"surehand {' '.join(args)} exit {done.returncode}: "
                f"{(done.stdout + done.stderr)[-800:]}"
            )
        return json.loads(done.stdout)

    # -- HTTP --------------------------------------------------------------------------------

    def api(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        timeout: float = 10,
        **headers: str,
    ) -> Any:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.api_port}{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
            | {name.replace("_", "-"): value for name, value in headers.items()},
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read() or b"null")

    def api_up(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.api_port}/healthz", timeout=3):
                return True
        except (OSError, urllib.error.URLError):
            return False

    def flower_tasks(self) -> dict[str, Any]:
        auth = base64.b64encode(self.flower_auth.encode()).decode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.flower_port}/api/tasks",
            headers={"Authorization": f"Basic {auth}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                found: dict[str, Any] = json.loads(response.read())
                return found
        except (OSError, urllib.error.URLError, ValueError):
            return {}

    def submit(
        self, subject: str, key: str | None = None, timeout: float = 10, recipient: str = "DEV"
    ) -> str:
        """Submit a TASK to ``recipient`` (DEV: the ledger agent) over HTTP; its id."""
        created = self.api(
            "POST",
            "/v1/tasks",
            {"sender": "PM", "recipient": recipient, "subject": subject},
            timeout=timeout,
            Idempotency_Key=key or f"check-{secrets.token_hex(6)}",
        )
        task_id: str = created["task_id"]
        return task_id

    def submit_retrying(
        self, subject: str, timeout: float, recipient: str = "DEV"
    ) -> tuple[str, list[str]]:
        """Submit a TASK as a client told to retry does: the same Idempotency-Key again after a
        retryable answer (503, or 409 in progress) or no answer at all, until one succeeds.
        Its id and every answer before it (``503``, ``409``, ``no answer``)."""
        key = f"check-{secrets.token_hex(6)}"
        answers: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.submit(subject, key, timeout=30, recipient=recipient), answers
            except urllib.error.HTTPError as error:
                if error.code not in (409, 503):
                    answer = f"{error.code} {error.read()!r}"
                    raise CheckFailed(f"submitting {subject!r}: {answer}") from None
                answers.append(str(error.code))
                pause = min(float(error.headers.get("Retry-After") or 1), 2.0)
            except OSError as error:  # refused, reset or timed out: the outcome is unknown
                answers.append(f"no answer ({type(error).__name__})")
                pause = 1.0
            if time.monotonic() + pause > deadline:
                raise CheckFailed(f"submitting {subject!r}: still {answers[-1]} after {timeout} s")
            time.sleep(pause)

    def tasks_with(self, marker: str) -> list[str]:
        """Ids of every TASK whose subject has ``marker`` (all pages of /v1/tasks), sorted."""
        found: list[str] = []
        for offset in range(0, 10_000, 100):
            page = self.api("GET", f"/v1/tasks?limit=100&offset={offset}")["tasks"]
            found += [task["task_id"] for task in page if marker in task["subject"]]
            if len(page) < 100:
                return sorted(found)
        raise CheckFailed("more than 10,000 TASKs listed")

    def bucket(self, task_id: str) -> str:
        """The TASK's bucket; empty while the API cannot say (503 with Postgres restarting)."""
        try:
            found: str = self.api("GET", f"/v1/tasks/{task_id}")["bucket"]
        except urllib.error.HTTPError as error:
            if error.code < 500:
                raise
            return ""
        except OSError:  # refused or reset: the API is restarting
            return ""
        return found

    def address(self, name: str) -> str:
        """The container's address on the compose network."""
        networks = "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}"
        found = self.podman("inspect", name, "--format", networks).stdout.split()
        if not found:
            raise CheckFailed(f"{name} has no address on a network")
        return found[0]

    def ledger(self, task_id: str | None = None) -> list[dict[str, Any]]:
        if not self.ledger_path.exists():
            return []
        lines = [json.loads(line) for line in self.ledger_path.read_text().splitlines() if line]
        return [line for line in lines if task_id is None or line["task_id"] == task_id]


def _run(argv: list[str], env: dict[str, str], *, check: bool) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise CheckFailed(f"{' '.join(argv[:6])}... exit {done.returncode}: {done.stderr[-800:]}")
    return done
