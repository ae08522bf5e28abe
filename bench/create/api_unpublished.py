"""``surehand api`` whose outbox publisher publishes nothing: bench/create/http_api.py's
``--unpublished`` variant. Not a way to run surehand (its TASKs are never published): it
measures how fast a create could answer if the publish ran in no thread of the API process at
all, the upper bound of moving the publisher to another process."""

from __future__ import annotations

import sys

import surehand.dispatcher.outbox_publisher as outbox_publisher


def _publish_nothing(*_args: object, **_kwargs: object) -> int:
    return 0


outbox_publisher.drain_outbox = _publish_nothing  # type: ignore[assignment]

if __name__ == "__main__":
    from surehand.cli import main

    sys.argv[0] = "surehand"
    main()
