"""The session server's door inside a sandbox without a network (``SUREHAND_AGENT_NETWORK=none``).

    python -I -S portal.py --listen 127.0.0.1:PORT --to SOCKET -- PROGRAM [ARG...]

Run first inside the sandbox's own network namespace (loopback only), it listens on the same
address as the session MCP server's URL (``SUREHAND_MCP_URL`` stays right), hands the listener
to a forwarder that relays each connection to ``SOCKET`` (the server's Unix socket, bound into
the sandbox), and then becomes PROGRAM (``exec``). The forwarder is double-forked, so it is no
child of PROGRAM (which may wait for all of its children); it dies with the sandbox, when
PROGRAM, the namespace's main process, ends.

Standard library only, and run with ``-I -S``: it must start in milliseconds.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
from collections.abc import Sequence

_CHUNK = 64 * 1024


def main(argv: Sequence[str]) -> int:
    """Listen, start the forwarder, become PROGRAM."""
    listen, target, program = _parse(argv)
    host, _, port = listen.rpartition(":")
    server = socket.create_server((host, int(port)))  # bound before PROGRAM can connect
    if os.fork() == 0:
        if os.fork() == 0:
            _serve(server, target)
        os._exit(0)
    os.wait()
    server.close()
    os.execvp(program[0], list(program))
    return 127  # not reached: exec raises or does not return


def _parse(argv: Sequence[str]) -> tuple[str, str, Sequence[str]]:
    args = list(argv)
    if len(args) < 6 or args[0] != "--listen" or args[2] != "--to" or args[4] != "--":
        raise SystemExit("usage: portal.py --listen HOST:PORT --to SOCKET -- PROGRAM [ARG...]")
    return args[1], args[3], args[5:]


def _serve(server: socket.socket, target: str) -> None:
    os.setsid()  # out of PROGRAM's group: its signals are not for the forwarder
    with contextlib.suppress(OSError):
        os.closerange(0, 3)
    while True:
        client, _ = server.accept()
        threading.Thread(target=_relay, args=(client, target), daemon=True).start()


def _relay(client: socket.socket, target: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(target)
    except OSError:
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    back.start()
    _pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy ``source`` to ``sink`` until ``source`` ends, then pass the end on."""
    try:
        while data := source.recv(_CHUNK):
            sink.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)
    with contextlib.suppress(OSError):
        source.shutdown(socket.SHUT_RD)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
