"""Settings of the agents: which handler serves each role, the probes admission asks, and the
built-in command agent -- its program, time limits, session MCP server, session directories,
environment and sandbox mode.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field


class AgentSettings(BaseModel):
    """The agents each role runs, their probes and the command agent's sessions."""

    agents: str = Field("", description="Comma list ROLE=module:function of agent handlers.")
    probes: str = Field(
        "",
        description="Comma list name=module:function of probes (besides @sh.probe in the agents "
        "modules), loaded by every process that can decide admission: worker, beat, reconcile, "
        "up and api.",
    )
    probe_wait_seconds: float = Field(
        60.0,
        ge=0,
        description="How long, from the opening of an interruption case, admission waits for a "
        "process that has a probe an open intent names but this process lacks, before it holds "
        "the TASK for review.",
    )
    probe_timeout_seconds: float = Field(
        20.0,
        gt=0,
        le=300,
        description="How long one built-in probe (git.push, http.request, "
        "github.pull_request) may take before its answer is inconclusive.",
    )
    probe_total_seconds: float = Field(
        120.0,
        gt=0,
        description="How long all the probes of one admission may take together: an agent "
        "can declare many effects with slow probes, and admission runs in a reconciler pass "
        "(or a cancel or recover request). Probes not asked within it leave their effects "
        "unknown, so the TASK is held for its approver.",
    )
    probe_egress: str = Field(
        "",
        description="Comma list of destinations the HTTP probes may reach besides "
        "SUREHAND_AGENT_EGRESS, in its syntax: a probe URL on the worker's loopback, a private "
        "range or a metadata address is refused unless an entry names it exactly.",
    )
    probe_credentials: str = Field(
        "",
        description="Comma list of the environment variables the http.request probe may send "
        "as credentials (an effect names one in its auth_env), each bound to where it may go: "
        "VAR@host (https, port 443) or VAR@host:port. No other variable is read, and none is "
        "sent to another host, port or scheme (the URL is the agent's).",
    )
    probe_github_url: str = Field(
        "https://api.github.com",
        description="REST API of the forge the github.pull_request probe asks (GitHub's, or a "
        "server speaking its shape); reached without an egress entry.",
    )
    probe_github_token_env: str = Field(
        "",
        description="Name of the environment variable holding the token the "
        "github.pull_request probe sends (empty: none).",
    )
    command_agent: str = Field(
        "",
        description="Program the built-in command agent runs: a command line, or the presets "
        "claude or codex (each optionally followed by more arguments for that CLI).",
    )
    command_timeout_seconds: float = Field(
        3600.0,
        gt=0,
        description="Command agent timeout: the longest any command agent's program runs, "
        "whatever its TASK's time limit (the shorter of the two stops it; this one ends the "
        "attempt as the agent's failure, a TASK's or role's time limit as timed_out).",
    )
    role_time_limits: str = Field(
        "",
        description="Default time limit per attempt, by role: a comma list of [ROLE=]SECONDS "
        "(e.g. DEV=600,QA=300, or 900 for every role without its own). A TASK's own "
        "time_limit_seconds wins over it; the session is stopped when it runs out and its "
        "attempt ends timed_out (docs/unattended-cancel.md).",
    )
    stop_check_seconds: float = Field(
        1.0,
        gt=0,
        le=60,
        description="How often a worker reads the store for cancel requests of the sessions it "
        "runs (one query for all of them) and checks their time limits.",
    )
    session_mcp: bool = Field(
        True,
        description="Offer each command agent's session an MCP server on 127.0.0.1 (effect_begin, "
        "effect_end, report, progress, delegate, recovery_brief) through SUREHAND_MCP_URL, "
        "SUREHAND_MCP_TOKEN and the .mcp.json file of its directory.",
    )
    session_mcp_ports: str = Field(
        "",
        pattern=r"^\s*(\d{1,5}\s*(-\s*\d{1,5}\s*)?)?$",
        description="Ports the session MCP server may listen on (127.0.0.1), as FIRST-LAST or "
        "one port, e.g. 41000-41099 for a firewall or an agent CLI that allows only those; "
        "it takes the first free one, one per worker process. Empty: any free port.",
    )
    work_dir: Path = Field(Path(".surehand/sessions"), description="Per-session directories.")
    session_retention_seconds: float = Field(
        7 * 24 * 3600.0,
        gt=0,
        description="Finished sessions' directories older than this are removed (checked as "
        "sessions end); kept longer than SUREHAND_COMMAND_TIMEOUT_SECONDS whatever it says.",
    )
    agent_env: str = Field(
        "",
        description="Comma list of environment variable names a command agent's program "
        "receives from the worker (e.g. ANTHROPIC_API_KEY,GITHUB_TOKEN). It gets nothing else "
        "of the worker's environment but PATH, locale, TZ and TERM: never a surehand URL or "
        "token (SUREHAND_* names are refused here).",
    )
    agent_sandbox: Literal["auto", "bwrap", "none"] = Field(
        "auto",
        description="How a command agent's program is confined: bwrap (its own PID, user and "
        "mount namespaces with bubblewrap: it sees no other process, nothing of the surehand "
        "home, and nothing of it outlives the session), none (a process group and a "
        "subreaper, the worker's network; docs/agents/sandbox.md says what that cannot "
        "promise), or "
        "auto (bwrap; where it does not work the worker refuses to run command agents until "
        "none is chosen here by name).",
    )
