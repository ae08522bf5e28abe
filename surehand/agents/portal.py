"""The session's ways out, inside a sandbox whose network is its own (egress and none).

    python -I -S portal.py --forward HOST:PORT=SOCKET [--forward ...] -- PROGRAM [ARG...]

Run first inside the sandbox's network namespace (loopback only), it listens on each
``HOST:PORT`` (the session server's address, so ``SUREHAND_MCP_URL`` stays right; the egress
proxy's; each listed loopback destination's), hands the listeners to a forwarder that relays
each connection to its ``SOCKET`` (one of the session's Unix sockets, served by the worker's
gateway, :mod:`surehand.agents.gateway`, and bound into the sandbox), and then becomes PROGRAM
(``exec``). The forwarder is double-forked, so it is no child of PROGRAM (which may wait for
all of its children); it dies with the sandbox, when PROGRAM, the namespace's main process,
ends. What a connection may do is the gateway's to decide: this only carries bytes.

Run with ``-I -S``, importing only C modules (``_socket``, ``_signal``, ``select``): it starts
before every sandboxed program, and the ``socket`` module alone (its enums) took 10 ms to
import here (``collections.abc``, for one annotation, 1.4 ms).
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # (C level: signal imports enum)
import _socket
import os
import select
import sys

_CHUNK = 64 * 1024
_IN, _OUT = select.EPOLLIN, select.EPOLLOUT
_BROKEN = select.EPOLLERR | select.EPOLLHUP
Listener = tuple[_socket.socket, str]


def main(argv: list[str]) -> int:
    """Listen, start the forwarder, become PROGRAM."""
    forwards, program = _parse(argv)
    listeners = [(_listen(host, port), target) for host, port, target in forwards]
    if os.fork() == 0:
        if os.fork() == 0:
            _serve(listeners)
        os._exit(0)
    os.wait()
    for listener, _target in listeners:
        listener.close()
    os.execvp(program[0], list(program))
    return 127  # not reached: exec raises or does not return


def _parse(argv: list[str]) -> tuple[list[tuple[str, int, str]], list[str]]:
    args, forwards = list(argv), []
    while len(args) >= 2 and args[0] == "--forward":
        address, _, target = args[1].partition("=")
        host, _, port = address.rpartition(":")
        if not target or not port.isdigit():
            break
        forwards.append((host.strip("[]"), int(port), target))
        del args[:2]
    if not forwards or len(args) < 2 or args[0] != "--":
        raise SystemExit("usage: portal.py --forward HOST:PORT=SOCKET [...] -- PROGRAM [ARG...]")
    return forwards, args[1:]


def _listen(host: str, port: int) -> _socket.socket:
    family = _socket.AF_INET6 if ":" in host else _socket.AF_INET
    listener = _socket.socket(family, _socket.SOCK_STREAM)
    listener.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))  # before PROGRAM runs: it may connect at once
    except OSError as error:
        raise SystemExit(f"surehand portal: cannot listen on {host} port {port}: {error}") from None
    listener.listen(128)
    listener.setblocking(False)
    return listener


class _End:
    """One side of a relayed connection: what is still to be sent to it, and its state."""

    def __init__(self, sock: _socket.socket) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.peer: _End = self
        self.out = b""  # read from the peer, not yet sent here
        self.reading = True  # paused while the peer has not taken what was read
        self.eof = False  # this side has sent its end
        self.shut = False  # its end (the peer's) was passed on to this side
        self.watched = True

    def mask(self) -> int:
        return (_IN if self.reading else 0) | (_OUT if self.out else 0)


def _serve(listeners: list[Listener]) -> None:
    os.setsid()  # out of PROGRAM's group: its signals are not for the forwarder
    # Nor are the session's: a stop's SIGTERM is passed to every process of the sandbox, and
    # the program keeps its session server through the grace that follows (its calls are
    # answered why it is being stopped). The forwarder ends with the sandbox's PID namespace.
    for number in (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP):
        _signal.signal(number, _signal.SIG_IGN)
    os.closerange(0, 3)
    poll = select.epoll()
    targets = {listener.fileno(): (listener, target) for listener, target in listeners}
    for fd in targets:
        poll.register(fd, _IN)
    ends: dict[int, _End] = {}
    while True:
        for fd, events in poll.poll():
            if fd in targets:
                _accept(poll, *targets[fd], ends)
            elif fd in ends:
                _step(poll, ends[fd], events, ends)


def _accept(
    poll: select.epoll, listener: _socket.socket, target: str, ends: dict[int, _End]
) -> None:
    try:
        fd, _address = listener._accept()  # type: ignore[attr-defined]  # (C level)
    except OSError:
        return
    client = _socket.socket(listener.family, _socket.SOCK_STREAM, 0, fd)
    upstream = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    client.setblocking(False)
    upstream.setblocking(False)
    try:
        upstream.connect(target)  # a Unix socket: at once, or refused (a full backlog too)
    except OSError:
        client.close()
        upstream.close()
        return
    one, other = _End(client), _End(upstream)
    one.peer, other.peer = other, one
    for end in (one, other):
        ends[end.fd] = end
        poll.register(end.fd, _IN)


def _step(poll: select.epoll, end: _End, events: int, ends: dict[int, _End]) -> None:
    """Move what ``events`` allow on ``end``; close the pair once both sides have ended (or
    at once when one breaks)."""
    try:
        if events & _IN and end.reading:
            _read(end)
        elif events & _BROKEN:
            if end.out:
                raise ConnectionError  # reset, or gone with bytes still owed to it
            # Hung up (a Unix peer that closed says so at once): what it sent is still read,
            # once its peer has room; until then epoll would repeat the hang-up without end.
            end.watched = False
            poll.unregister(end.fd)
        if events & _OUT:
            _flush(end)
    except OSError:
        _close(poll, end, ends)
        return
    if end.eof and end.peer.eof and not end.out and not end.peer.out:
        _close(poll, end, ends)
        return
    for side in (end, end.peer):
        if side.watched:
            poll.modify(side.fd, side.mask())
        elif side.reading:
            side.watched = True
            poll.register(side.fd, side.mask())


def _read(end: _End) -> None:
    try:
        data = end.sock.recv(_CHUNK)
    except BlockingIOError:
        return
    if not data:
        end.eof, end.reading = True, False
    else:
        end.peer.out += data
    _flush(end.peer)
    end.reading = end.reading and not end.peer.out  # paused until the peer takes it


def _flush(end: _End) -> None:
    """Send what ``end`` is owed; once all is sent, read its peer again, or pass its end on."""
    if end.out:
        try:
            sent = end.sock.send(end.out)
        except BlockingIOError:
            sent = 0
        end.out = end.out[sent:]
    if end.out:
        return
    if not end.peer.eof:
        end.peer.reading = True
    elif not end.shut:
        end.shut = True
        end.sock.shutdown(_socket.SHUT_WR)


def _close(poll: select.epoll, end: _End, ends: dict[int, _End]) -> None:
    for side in (end, end.peer):
        if ends.pop(side.fd, None) is not None and side.watched:
            poll.unregister(side.fd)
        side.sock.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
