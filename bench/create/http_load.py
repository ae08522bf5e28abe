"""The two sides of ``http_api.py``'s measurement: the servers it starts (each in its own
process group, ready once it answers) and the load: ``clients`` keep-alive connections sending
``POST /v1/tasks`` (a minimal HTTP/1.1 client, or httpx), timing each answer."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.common.procs import (
    children,
    cpu_seconds,
    stop_group,
)
from bench.common.services import free_port, spawn_argv, wait_for
from bench.create.submit_backends import REQUEST

REPO = Path(__file__).resolve().parents[2]
EXPECTED = {"bare": 201, "create": 201, "reuse": 200, "unpublished": 201, "process": 201}


@dataclass
class Server:
    name: str
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float:
        """CPU of the server process and of its live children (a publisher process)."""
        return sum(cpu_seconds(pid) for pid in (self.process.pid, *children(self.process.pid)))

    def stop(self) -> None:
        stop_group(self.process)


def start_server(name: str, argv: list[str], env: dict[str, str], tmp: Path) -> Server:
    port = free_port()
    log = tmp / f"{name}.log"
    process = spawn_argv([*argv, "--port", str(port)], env, log, REPO).process
    server = Server(name, process, port, log)

    def answers() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited:\n{log.read_text()[-3000:]}")
        try:
            return httpx.get(server.url() + "/openapi.json", timeout=1).status_code < 500
        except httpx.HTTPError:
            return False

    wait_for(answers, 60, f"the {name} server")
    return server


@dataclass
class Batch:
    requests: int
    seconds: float
    latencies: list[float]
    unexpected: dict[str, int] = field(default_factory=dict)
    server_cpu_seconds: float = 0.0
    client_cpu_seconds: float = 0.0

    @property
    def per_second(self) -> float:
        return self.requests / self.seconds


def body_for(variant: str, index: int, reuse_ids: list[str]) -> dict[str, Any]:
    if variant == "reuse":
        return {**REQUEST, "client_submission_id": reuse_ids[index % len(reuse_ids)]}
    return {**REQUEST, "client_submission_id": "h-" + uuid.uuid4().hex}


class RawConnection:
    """A minimal HTTP/1.1 keep-alive client on one connection: POST a JSON body, read the
    status line, the headers and a Content-Length body. A small fraction of httpx's CPU per
    request, so that the servers, not this process, are what the batches measure."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str):
        self.reader, self.writer, self.host = reader, writer, host.encode()

    @classmethod
    async def open(cls, base: str) -> RawConnection:
        host, port = base.removeprefix("http://").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        return cls(reader, writer, f"{host}:{port}")

    async def post(self, path: str, body: dict[str, Any]) -> int:
        payload = json.dumps(body).encode()
        self.writer.write(
            b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (path.encode(), self.host, len(payload), payload)
        )
        status = int((await self.reader.readline()).split(b" ", 2)[1])
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
            elif name.strip().lower() == b"transfer-encoding":
                raise RuntimeError("chunked answers are not read by this client")
        await self.reader.readexactly(length)
        return status

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


async def run_batch(
    base: str, variant: str, clients: int, requests: int, reuse_ids: list[str], kind: str = "raw"
) -> Batch:
    """``requests`` POSTs spread over ``clients`` concurrent keep-alive clients."""
    if kind == "raw":
        return await run_raw_batch(base, variant, clients, requests, reuse_ids)
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    latencies: list[float] = []
    unexpected: dict[str, int] = {}
    per_client = max(1, requests // clients)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60) as client:
        # open every connection first (not timed)
        await asyncio.gather(*(client.get("/openapi.json") for _ in range(clients)))

        async def one_client(offset: int) -> None:
            for i in range(per_client):
                body = body_for(variant, offset * per_client + i, reuse_ids)
                started = time.perf_counter()
                response = await client.post("/v1/tasks", json=body)
                latencies.append(time.perf_counter() - started)
                if response.status_code != EXPECTED[variant]:
                    key = str(response.status_code)
                    unexpected[key] = unexpected.get(key, 0) + 1

        started = time.perf_counter()
        await asyncio.gather(*(one_client(n) for n in range(clients)))
        seconds = time.perf_counter() - started
    return Batch(per_client * clients, seconds, latencies, unexpected)


async def run_raw_batch(
    base: str, variant: str, clients: int, requests: int, reuse_ids: list[str]
) -> Batch:
    latencies: list[float] = []
    unexpected: dict[str, int] = {}
    per_client = max(1, requests // clients)
    connections = [await RawConnection.open(base) for _ in range(clients)]  # not timed

    async def one_client(offset: int) -> None:
        connection = connections[offset]
        for i in range(per_client):
            body = body_for(variant, offset * per_client + i, reuse_ids)
            started = time.perf_counter()
            status = await connection.post("/v1/tasks", body)
            latencies.append(time.perf_counter() - started)
            if status != EXPECTED[variant]:
                unexpected[str(status)] = unexpected.get(str(status), 0) + 1

    started = time.perf_counter()
    await asyncio.gather(*(one_client(n) for n in range(clients)))
    seconds = time.perf_counter() - started
    for connection in connections:
        await connection.close()
    return Batch(per_client * clients, seconds, latencies, unexpected)
