"""Named crash points for crash-recovery tests.

``SUREHAND_CRASH_AT`` names one or more points (comma separated). When running code reaches a
named point, the process kills itself with SIGKILL: no ``finally`` blocks, no atexit handlers,
no flushing, exactly like a power cut or an OOM kill. Unset (the default), a crash point costs
one dictionary lookup. Never set it outside tests.
"""

from __future__ import annotations

import os
import signal

ENV = "SUREHAND_CRASH_AT"


def crash_point(name: str) -> None:
    """Die here, by SIGKILL, if this point is named in ``SUREHAND_CRASH_AT``."""
    armed = os.environ.get(ENV)
    if armed and name in armed.split(","):
        os.kill(os.getpid(), signal.SIGKILL)
