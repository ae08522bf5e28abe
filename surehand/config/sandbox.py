"""Settings of a command agent's confinement (issue 29): its network and egress allowlist,
per-session connection caps, what the sandbox binds and hides, resource limits, the sandbox's
view and a session's disk quotas, and the free space a worker needs to claim a TASK.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class SandboxSettings(BaseModel):
    """What a command agent's program may reach and use."""

    # -- the agents' network (issue 29): egress by default, an allowlist, per-session caps --
    agent_network: Literal["egress", "none", "host"] = Field(
        "egress",
        description="The network of a command agent's program (needs bwrap, except host). "
        "egress: a network namespace of its own; the session MCP server at its URL, and out "
        "only through the worker's proxy (HTTPS_PROXY/HTTP_PROXY) to what "
        "SUREHAND_AGENT_EGRESS lists; nothing on the worker's loopback, private networks or "
        "metadata addresses unless listed exactly. none: the session MCP server and nothing "
        "else. host: the worker's network, every service on its loopback included (an "
        "explicit opt-in, warned about at start; surehand up refuses it without API tokens).",
    )
    agent_egress: str = Field(
        "",
        description="Comma list of destinations a program may reach in the egress network "
        "mode: host, host:port, *.suffix (public addresses only), IP, IP:port, [IPv6]:port. The "
        "claude and codex presets add api.anthropic.com:443 or api.openai.com:443. A loopback "
        "destination (a model on 127.0.0.1) needs its port: 127.0.0.1:8080.",
    )
    agent_connections: int = Field(
        64,
        ge=1,
        description="Connections one session's program may hold at once through the worker "
        "(the session MCP server, the egress proxy, listed loopback destinations); more wait "
        "until one ends. The session MCP server's TCP port, reached without a sandboxed "
        "network, takes at most twice as many from all programs together.",
    )
    agent_idle_seconds: float = Field(
        300.0,
        gt=0,
        description="A program's connection through the worker that moves no byte for this "
        "long is closed (a request's head must arrive within 10 s).",
    )
    agent_bind: str = Field(
        "",
        description="Comma list of paths bound into the sandbox, read-write (PATH) or read-only "
        "(PATH:ro), e.g. the repository an agent works on or a tool the sandbox's view lacks "
        "(it shows the system's /usr, a part of /etc, surehand's Python and the program's "
        "own files; no home directory). The most specific path wins: a hidden path (the "
        "surehand home...) inside a bound one stays hidden, a path bound inside a hidden one "
        "is seen.",
    )
    agent_hide: str = Field(
        "",
        description="Comma list of further paths the sandbox hides from agents where they lie "
        "inside a bound path (an empty read-only directory or file in their place); the "
        "surehand home, the session directories and the SQLite store are always hidden.",
    )
    agent_user: str = Field(
        "",
        description="Run agent programs as this user (name or uid[:gid]) instead of the "
        "worker's; a root worker should name an unprivileged one.",
    )
    agent_memory_mib: int = Field(
        2048, ge=16, description="Memory a session's programs may use together (MiB)."
    )
    agent_max_processes: int = Field(
        256, ge=4, description="Processes a session's programs may run at once."
    )
    agent_cpu_seconds: int = Field(
        3600, ge=1, description="CPU time each process of a session may use (seconds)."
    )
    agent_file_size_mib: int = Field(
        1024, ge=1, description="Largest file a session's programs may write (MiB)."
    )
    agent_open_files: int = Field(
        1024, ge=16, description="Open files each process of a session may hold."
    )
    # -- the sandbox's view and a session's quotas (issue 29 items 5 and 6) --
    agent_tmpfs_mib: int = Field(
        128,
        ge=1,
        description="Size of the sandbox's private /tmp and of its /dev/shm, each (MiB; memory, "
        "which RLIMIT_AS does not count and a session cgroup does); /run gets 1 MiB.",
    )
    agent_disk_mib: int = Field(
        1024,
        ge=1,
        description="Disk a session may add to its directory, its captured outputs and its "
        "per-TASK worktree together (MiB). One found over it is stopped and its TASK goes "
        "through admission (cause quota_exceeded).",
    )
    agent_disk_files: int = Field(
        100_000,
        ge=10,
        description="Files and directories a session may add to the same places and its "
        "sandbox's /tmp, /dev/shm and /run; over it, stopped like SUREHAND_AGENT_DISK_MIB.",
    )
    agent_quota_check_seconds: float = Field(
        1.0,
        gt=0,
        description="How often a worker measures its sessions against SUREHAND_AGENT_DISK_MIB "
        "and SUREHAND_AGENT_DISK_FILES (at least 20 times as long as a round takes). A session "
        "can pass its quota by what it writes in one interval.",
    )
    work_dir_min_free_mib: int = Field(
        2048,
        ge=0,
        description="A worker claims no TASK while the file system of SUREHAND_WORK_DIR has "
        "less free space than this (MiB): the TASK stays in inbox for later or another worker. "
        "Keep it above the concurrency times SUREHAND_AGENT_DISK_MIB; 0 turns the check off.",
    )
    work_dir_min_free_files: int = Field(
        10_000,
        ge=0,
        description="The same for free files (inodes) on that file system; 0 turns it off.",
    )
    work_dir_retry_seconds: float = Field(
        30.0,
        gt=0,
        description="How long a worker that had no room for a session waits before the TASK's "
        "message is tried again (by any worker of its role).",
    )
