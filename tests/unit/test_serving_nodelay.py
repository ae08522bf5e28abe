"""The HTTP servers answer without Nagle's delay.

``surehand.doors.serving.bind`` creates the listening socket itself. asyncio sets TCP_NODELAY on an
accepted connection only when the socket's protocol is IPPROTO_TCP, and a socket made with
``socket.socket(family, SOCK_STREAM)`` says 0: every keep-alive response (headers and body are
two writes) then waited for the client's delayed ACK, about 40 ms a request
(``bench/create/http_api.py`` measured 44 ms per sequential request against 1.8 ms).
"""

from __future__ import annotations

import socket

from fastapi import FastAPI

from surehand.doors.serving import BackgroundServer, bind


def test_the_listening_socket_is_tcp() -> None:
    sock = bind("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
    finally:
        sock.close()


def test_accepted_connections_have_tcp_nodelay() -> None:
    app = FastAPI()

    @app.get("/ping")
    def ping() -> dict[str, bool]:
        return {"ok": True}

    server = BackgroundServer(app, "127.0.0.1", 0).start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as client:
            client.sendall(b"GET /ping HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert client.recv(4096).startswith(b"HTTP/1.1 200")
            connections = list(server.server.server_state.connections)
            assert connections
            for connection in connections:
                accepted = connection.transport.get_extra_info("socket")
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    finally:
        server.stop()
