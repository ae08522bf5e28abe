"""Probes of the hostile agent (``tests/hostile_agent.py``) against the sandbox's view and a
session's quotas: what of the host it can see, and what it can fill.

- ``view``: for each of ``paths`` whether it exists and can be read (the worker user's home,
  the checkout's dotfiles, ``/etc/shadow``...), what ``/`` holds, and whether ``/``, ``/etc``,
  ``/usr`` and ``/dev`` take a new file;
- ``disk_flood``: write ``mib`` MiB in 1 MiB pieces into the session directory;
- ``files_flood``: make ``files`` empty files in ``where`` (the session directory, or ``/tmp``)
  and hold them ``hold`` seconds (a tmpfs's files go with the sandbox: a flood that matters
  is one that is held);
- ``tmpfs_flood``: fill ``/tmp``, ``/dev/shm`` and ``/run`` until each refuses (at most
  ``mib`` MiB each), then free them; how much each took and how it refused.

Each reports what it found; a probe stopped by its quota reports nothing (its session is).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

MIB = 1024 * 1024


def seen_as(path: str) -> str:
    try:
        if os.path.isdir(path):
            return f"listed: {sorted(os.listdir(path))[:8]}"
        with open(path, "rb") as file:
            return f"read: {len(file.read(64))} bytes"
    except FileNotFoundError:
        return "absent"
    except OSError as error:
        return f"refused: {error.strerror}"


def _write(directory: str) -> str:
    try:
        Path(directory, "surehand-probe").write_text("x")
    except OSError as error:
        return f"refused: {error.strerror}"
    return "written"


def view_probe(params: dict[str, Any]) -> dict[str, Any]:
    return {
        "paths": {path: seen_as(path) for path in params["paths"]},
        "root": sorted(os.listdir("/")),
        "writes": {place: _write(place) for place in ("/", "/etc", "/usr", "/dev")},
    }


def disk_flood_probe(params: dict[str, Any]) -> dict[str, Any]:
    block = os.urandom(MIB)  # incompressible, whatever the file system
    written = 0
    for number in range(int(params["mib"])):
        with open(f"flood-{number}.bin", "wb") as file:
            file.write(block)
        written += 1
    return {"written_mib": written}


def files_flood_probe(params: dict[str, Any]) -> dict[str, Any]:
    where = Path(params.get("where", "."))
    made = 0
    for number in range(int(params["files"])):
        (where / f"f{number}").touch()
        made += 1
    time.sleep(float(params.get("hold", 0)))
    return {"made": made}


def tmpfs_flood_probe(params: dict[str, Any]) -> dict[str, Any]:
    found = {}
    for place in ("/tmp", "/dev/shm", "/run"):
        found[place] = _fill(Path(place) / "flood.bin", int(params["mib"]))
    return found


def _fill(path: Path, most_mib: int) -> dict[str, Any]:
    block, written, refusal = b"\xa5" * MIB, 0, None
    try:
        with path.open("wb", buffering=0) as file:
            for _ in range(most_mib):
                written += file.write(block)
    except OSError as error:
        refusal = error.strerror
    finally:
        path.unlink(missing_ok=True)
    return {"mib": round(written / MIB), "refused": refusal}


PROBES = {
    "view": view_probe,
    "disk_flood": disk_flood_probe,
    "files_flood": files_flood_probe,
    "tmpfs_flood": tmpfs_flood_probe,
}
