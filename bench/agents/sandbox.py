"""Benchmark what confining a command agent's program costs per session.

    python bench/agents/sandbox.py [--rounds N]

Each round starts the same program (``true``, which exits at once) the way a session does --
the session's network (its gateway sockets, where it has a network of its own), the
confinement's launch (environment, cgroup, sandbox command line) and the process group under
the trampoline, waited for until it is gone, its cgroup removed and its network closed -- in
each variant, interleaved so that a noisy machine affects every row alike:

- ``bare``: ``true`` started directly (subprocess), the floor of starting any program;
- ``none``: the fallback: trampoline as subreaper, limits, session cgroup;
- ``bwrap, host network``: the sandbox: the same plus bubblewrap's namespaces and view;
- ``bwrap, network none``: plus a network namespace, the gateway's relay to the session
  server and the portal that reaches it;
- ``bwrap, egress`` (the default): plus the egress proxy's socket and its portal forward.

Printed as a table (median, p90, and each variant's extra time over ``none``, the issue's
measure: target <= 20 ms for bwrap, <= 50 ms for egress) and saved to
``bench/results/sandbox-<UTC>.json``. A benchmark, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

if __name__ == "__main__":  # a script: bench.* and tests.* from the repository, not its folder
    sys.path[0] = str(Path(__file__).resolve().parents[2])

from bench.common.procs import machine
from bench.common.results import print_rows, save
from surehand.agents.groups import AgentGroup
from surehand.agents.launch import Confinement
from surehand.config import Settings

TARGETS_MS = {"bwrap, host network": 20.0, "bwrap, egress": 50.0}
PROGRAM = ["true"]


def confined(settings: Settings, work: Path) -> Callable[[int], float]:
    """One session's start and end in ``settings``' confinement; its seconds."""
    confinement = Confinement.from_settings(settings)
    socket_dir = Path(tempfile.mkdtemp(prefix="bench-mcp-"))
    mcp = (45999, socket_dir / "mcp.sock")  # nothing connects in this benchmark

    def run(round_number: int) -> float:
        session_dir = work / f"{settings.agent_sandbox}-{settings.agent_network}-{round_number}"
        session_dir.mkdir(mode=0o700, parents=True)
        started = time.perf_counter()
        with confinement.net.session(session_dir.name, mcp) as network:
            launch = confinement.launch(
                PROGRAM,
                name=session_dir.name,
                session_dir=session_dir,
                session_env={"SUREHAND_TASK_ID": "TASK-20260101-001"},
                network=network,
            )
            group = AgentGroup.start(
                launch.argv,
                cwd=session_dir,
                env=launch.env,
                stdout=subprocess.DEVNULL,  # type: ignore[arg-type]
                stderr=subprocess.DEVNULL,  # type: ignore[arg-type]
                trampoline=launch.trampoline,
                cgroup=launch.cgroup,
            )
            ended = threading.Event()
            with group.waking(ended):  # as a session waits: woken by the program's end
                while group.poll() is None:
                    ended.wait(1.0)
            group.stop()
        return time.perf_counter() - started

    return run


def bare(_round: int) -> float:
    started = time.perf_counter()
    subprocess.run(PROGRAM, check=True)
    return time.perf_counter() - started


def measure(rounds: int, work: Path) -> dict[str, list[float]]:
    base = {"work_dir": work / "sessions", "home": work / "home"}
    variants: dict[str, Callable[[int], float]] = {
        "bare": bare,
        "none": confined(Settings(**base, agent_sandbox="none", agent_network="host"), work),
        **{
            f"bwrap, {label}": confined(
                Settings(**base, agent_sandbox="bwrap", agent_network=network), work
            )
            for label, network in [("host network", "host"), ("network none", "none")]
        },
        "bwrap, egress": confined(
            Settings(**base, agent_sandbox="bwrap", agent_egress="api.anthropic.com:443"), work
        ),
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for number in range(rounds):
        for name, run in variants.items():
            times[name].append(run(number))
    return times


def summarise(times: dict[str, list[float]]) -> list[dict[str, object]]:
    floor = statistics.median(times["none"])
    rows = []
    for name, seconds in times.items():
        median = statistics.median(seconds)
        rows.append(
            {
                "variant": name,
                "median_ms": round(median * 1000, 2),
                "p90_ms": round(statistics.quantiles(seconds, n=10)[-1] * 1000, 2),
                "extra_over_none_ms": round((median - floor) * 1000, 2),
                "ratio_to_none": round(median / floor, 3),
                "target_extra_ms": TARGETS_MS.get(name),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as directory:
        rows = summarise(measure(args.rounds, Path(directory)))
    targets = ", ".join(f"{name} <= {ms:g} ms" for name, ms in TARGETS_MS.items())
    print_rows(f"agent program start and end, {args.rounds} rounds (over none: {targets})", rows)
    document = {"rounds": args.rounds, "targets_extra_over_none_ms": TARGETS_MS}
    save("sandbox", {**document, "machine": machine(), "rows": rows})


if __name__ == "__main__":
    main()
