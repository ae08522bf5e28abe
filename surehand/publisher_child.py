"""The child side of the outbox publisher process (``SUREHAND_API_PUBLISHER=process``):
:class:`~surehand.dispatcher.publisher_process.PublisherProcess` runs
``python -m surehand.publisher_child FD``. Its own runtime publishes the outbox from the usual
background thread, drained at start and at every wake byte read from ``FD``, until the pipe's
end-of-file (the API is gone or stopping)."""

from __future__ import annotations

import logging
import os
import sys

from surehand import logjson
from surehand.config import Settings
from surehand.runtime import Runtime


def serve(wake_fd: int) -> None:
    """The child: drain at start, at every byte read, until the pipe's end-of-file."""
    settings = Settings()
    logjson.install(settings.log_format)
    logjson.configure_process(logging.INFO)
    runtime = Runtime(settings)
    runtime.start_publishing()
    wake = runtime.services.wake_publisher
    assert wake is not None
    try:
        while os.read(wake_fd, 4096):  # many wakes read at once are one drain
            wake()
    finally:
        runtime.close()


if __name__ == "__main__":
    serve(int(sys.argv[1]))
