"""Settings from ``SUREHAND_*`` environment variables (pydantic-settings).

The embedded default needs none of them: a SQLite file under ``./.surehand/``, the in-process
memory broker and fakeredis for leases. A deployment sets the three URLs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_HOME = Path(".surehand")


def default_database_url(home: Path = DEFAULT_HOME) -> str:
    return f"sqlite:///{home / 'surehand.sqlite3'}"


class Settings(BaseSettings):
    """Every knob surehand reads. Each field is the env var ``SUREHAND_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="SUREHAND_", extra="ignore", frozen=True)

    home: Path = Field(DEFAULT_HOME, description="Directory for the embedded SQLite file.")
    database_url: str = Field("", description="SQLAlchemy URL; default SQLite under home.")
    database_pool_size: int = Field(
        10,
        ge=1,
        le=1000,
        description="Postgres connections each of the store's three pools opens at most per "
        "process (as needed, then kept), whatever the process's concurrency: a process holds "
        "at most 3 x this many. A thread that finds every one in use waits for one (see "
        "database_pool_timeout_seconds); sessions touch the database in short bursts, so a few "
        "connections serve many sessions. SQLite keeps this many and opens more without waiting.",
    )
    database_pool_timeout_seconds: float = Field(
        30.0,
        gt=0,
        description="How long a thread waits for one of its pool's Postgres connections when "
        "all are in use; past it the call fails with StoreUnavailable (retryable), saying the "
        "pool was exhausted: raise database_pool_size (and Postgres' max_connections) then.",
    )
    redis_url: str = Field("", description="Redis for leases; empty means in-process fakeredis.")
    redis_namespace: str = Field(
        "", description="Prefix for surehand's Redis keys (to share one Redis database)."
    )
    broker_url: str = Field(
        "",
        description="Celery broker. Empty: writers publish nothing and `surehand up` picks new "
        "TASKs up with its sweep over the in-process memory transport.",
    )
    tenant: str = Field("default", description="Tenant for Python/CLI calls.")
    lease_ttl_seconds: float = Field(30.0, gt=0, description="Session lease TTL.")
    heartbeat_seconds: float = Field(10.0, gt=0, description="Lease renewal interval.")
    reconcile_interval_seconds: float = Field(5.0, gt=0, description="Reconciler period.")
    lost_grace_seconds: float = Field(
        15.0,
        ge=0,
        description="A lease missing this long means the session is lost; keep it above the "
        "heartbeat interval so a Redis restart is never mistaken for a loss.",
    )
    republish_after_seconds: float = Field(
        300.0,
        gt=0,
        description="Publish a TASK again if it is still unclaimed in inbox this long after its "
        "last publish (a lost message never strands it; duplicates are harmless).",
    )
    sweep_interval_seconds: float = Field(1.0, gt=0, description="Dispatcher sweep period.")
    startup_wait_seconds: float = Field(
        30.0,
        ge=0,
        description="How long worker, api and `db upgrade` wait at start for a database that is "
        "restarting or still starting.",
    )
    # Accepted so that existing configurations keep loading; the receipt stages they tuned
    # are gone (migration 0019).
    submission_wait_seconds: float = Field(
        5.0,
        ge=0,
        description="No effect (kept so that existing configurations load): a receipt is "
        "committed with its TASK, so a concurrent write_task waits on the database for the "
        "first commit and answers reused; it never answers in_progress.",
    )
    submission_hold_seconds: float = Field(
        30.0,
        gt=0,
        description="No effect (kept so that existing configurations load): no caller holds "
        "a submission; a receipt is committed with its TASK.",
    )
    stalled_after_seconds: float = Field(
        300.0,
        gt=0,
        description="No effect (kept so that existing configurations load): every receipt is "
        "committed with its TASK, so none stalls.",
    )
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
    # -- end of the view and quota block --
    agent_workspace: str = Field(
        "",
        description="Where command agent sessions work: a comma list of [ROLE=]SPEC, a role's "
        "entry overriding the one without. SPEC: a directory (shared, bound read-write into the "
        "sandbox) or worktree:/path/to/repo (a clone of its own per TASK on the branch "
        "surehand/<task id>, fetched into the repository when a session ends; its successors "
        "find it). The claude preset gets it with --add-dir, "
        "codex with -C, programs in SUREHAND_WORKSPACE (docs/agents/claude-code-and-codex.md).",
    )
    claude_tools: str = Field(
        "",
        description="Comma list of further tools the claude preset allows besides the session "
        "tools (--allowedTools), e.g. Bash,Edit,Write,mcp__github (every tool of that server).",
    )
    claude_mcp_config: str = Field(
        "",
        description="Comma list of MCP config files (Claude Code's .mcp.json format) with the "
        "operator's own servers, passed to the claude preset with --mcp-config; allow their "
        "tools in SUREHAND_CLAUDE_TOOLS and pass their secrets by SUREHAND_AGENT_ENV.",
    )
    claude_hooks: bool = Field(
        True,
        description="Journal the claude preset's effectful tool calls the agent did not declare "
        "(Claude Code hooks): an operation intent before each, its outcome after.",
    )
    claude_effectful: str = Field(
        "Bash,mcp__*",
        description="Comma list of tool name patterns (fnmatch) whose calls the claude hooks "
        "journal as effects; the session's own tools never are (WebFetch only GETs: add it "
        "where a GET of yours has effects).",
    )
    claude_read_only_commands: str = Field(
        "",
        description="Retired: it listed Bash commands the claude hooks did not journal. Every "
        "Bash command first runs a shell setup the agent can rewrite, and git runs filters, "
        "diff drivers and hooks from repository config the agent can write, so no command can "
        "be exempt: every Bash command is journaled, and a worker with this set refuses to "
        "start until it is unset.",
    )
    # --- the journal: Claude Code's hooks, the session tools' limits (issue 29, journal) ----
    claude_hook_timeout_seconds: int = Field(
        60,
        ge=1,
        le=600,
        description="How long Claude Code waits for the session server to answer a hook "
        "(each tool call's journaling); an answer that does not come in time blocks the call.",
    )
    session_tools_max_operations: int = Field(
        500,
        ge=1,
        description="Operations (effect_begin and the hooks' journaled calls) one session may "
        "record; more are refused with session_limit (a journaled call is then denied).",
    )
    session_tools_max_reports: int = Field(
        100,
        ge=1,
        description="REPORT revisions (report and progress calls) one session may ask for; "
        "more are refused with session_limit (its final message is still its REPORT).",
    )
    session_tools_max_mib: int = Field(
        32,
        ge=1,
        description="MiB of arguments (REPORT bodies, effect args, outcomes, journaled tool "
        "input and output) one session may send to be stored; more is refused with "
        "session_limit.",
    )
    session_tools_max_children: int = Field(
        50,
        ge=1,
        description="Child TASKs (delegate calls, ctx.delegate) one session may ask for; more "
        "are refused with session_limit (a call answered reused counts too).",
    )
    delegation_max_depth: int = Field(
        8,
        ge=1,
        description="How deep delegated TASKs may nest: a session whose TASK already has this "
        "many ancestors (parent, its parent...) cannot delegate (session_limit), so no chain "
        "of agents grows the queue without end.",
    )
    session_tools_calls_per_minute: int = Field(
        300,
        ge=1,
        description="Calls to the session tools and journaled hook events one session may "
        "make in any 60 seconds; more are refused with session_limit (retryable) until the "
        "minute passes.",
    )
    codex_sandbox: Literal["auto", "read-only", "workspace-write", "danger-full-access"] = Field(
        "auto",
        description="Codex's own sandbox mode for the codex preset; auto: danger-full-access "
        "inside surehand's bwrap sandbox (which confines it), workspace-write outside it.",
    )
    max_consecutive_interruptions: int = Field(
        3,
        ge=1,
        description="A TASK whose last attempts were interrupted or failed this many times in "
        "a row is held for its approver instead of run again.",
    )
    # -- running unattended (issue 32): retry on evidence, cost and budgets --
    retry_max_attempts: str = Field(
        "",
        description="Comma list of [ROLE=]N: how many attempts in a row a TASK of the role may "
        "make when its agent fails (or times out) with nothing open -- no effect declared, or "
        "every one settled -- before it is held with 'gave up after N attempts'. It applies "
        "only where effects are observed: Python agents, the claude preset with hooks, and "
        "the roles SUREHAND_RETRY_DECLARED_ROLES names; other agents make 1 (held at their "
        "first failure, whatever this says). Default 3.",
    )
    retry_declared_roles: str = Field(
        "",
        description="Comma list of roles whose command agents declare every side effect "
        "(surehand effect, the session tools) although surehand cannot observe it (a plain "
        "program, Codex): the operator says so, and their failures are retried like "
        "observed ones.",
    )
    retry_backoff_seconds: str = Field(
        "10",
        description="Comma list of [ROLE=]SECONDS: the wait before the first automatic retry; "
        "it doubles with each further one (up to SUREHAND_RETRY_BACKOFF_MAX_SECONDS) and is "
        "jittered (between half and all of it).",
    )
    retry_backoff_max_seconds: str = Field(
        "600", description="Comma list of [ROLE=]SECONDS: the longest wait before a retry."
    )
    retry_overload_backoff_seconds: str = Field(
        "60",
        description="Comma list of [ROLE=]SECONDS: the first wait instead of "
        "SUREHAND_RETRY_BACKOFF_SECONDS when the agent's output says its model API was "
        "overloaded (529) or rate-limited (429).",
    )
    agent_budget_usd: str = Field(
        "",
        description="Comma list of [ROLE=]USD: what a TASK of the role may spend on its LLM "
        "agent across its attempts unless the TASK names its own budget_usd (claude preset: "
        "--max-budget-usd with what is left). Empty: no budget.",
    )
    fcop_dir: Path | None = Field(None, description="If set, mirror TASK/REPORT files here.")
    api_tokens: str = Field(
        "",
        description="Comma list token=name:ROLE:tenant for the HTTP API and MCP over HTTP; "
        "empty means one local ADMIN principal, allowed only on a loopback address.",
    )
    api_host: str = Field(
        "127.0.0.1", description="Address `surehand api` and `surehand up` bind (loopback)."
    )
    api_port: int = Field(8000, ge=0, le=65535, description="Port of the HTTP API (0: any).")
    api_publisher: Literal["thread", "process"] = Field(
        "process",
        description="Where `surehand api` publishes created TASKs from the outbox: a thread of "
        "the API process, or a child process woken through a pipe (the publish's CPU then "
        "leaves the API's interpreter lock: for hosts with a core to spare; docs/configuration.md: "
        "The API's publisher).",
    )
    api_max_body_bytes: int = Field(
        2 * 1024 * 1024,
        gt=0,
        description="Largest request body the API reads (a 1 MiB TASK body plus its JSON "
        "envelope); larger requests get 413 before anything is parsed or written.",
    )
    api_allowed_hosts: str = Field(
        "",
        description="Comma list of Host names (name, or name:port) the HTTP API and MCP over HTTP "
        "answer besides the loopback names 127.0.0.1, localhost and [::1]; any other Host gets "
        "421 (protection against DNS rebinding). Add the names clients use behind a proxy.",
    )
    api_forwarded_allow_ips: str = Field(
        "",
        description="Comma list of proxy addresses (IPs or networks, or *) whose "
        "X-Forwarded-For and X-Forwarded-Proto headers the API (and MCP over HTTP) believes; "
        "default none: from anyone else they are ignored, since any local process could "
        "otherwise pick the address it is throttled as. Behind a TLS proxy, list its address "
        "so that the console sees https (its cookie gets Secure) and the real client address "
        "(failed tokens are counted per client).",
    )
    api_docs: bool = Field(
        True,
        description="Serve the API's reference at /docs (a plain page, no scripts) and its "
        "OpenAPI document at /openapi.json; false turns both off (404).",
    )
    console_idle_seconds: float = Field(
        1800.0,
        gt=0,
        description="A console session unused this long (no page opened; the live refresh does "
        "not count) ends; the next page asks to sign in again.",
    )
    console_session_seconds: float = Field(
        8 * 3600.0, gt=0, description="The longest a console session lasts, used or not."
    )
    console_searches_per_minute: int = Field(
        60,
        ge=1,
        description="Text searches (a board, list or live refresh with a search) one console "
        "principal may run per minute, with as many at once; beyond, 429 with Retry-After.",
    )
    search_scan_rows: int = Field(
        5000,
        ge=100,
        le=1_000_000,
        description="TASKs a text search (the console's search box, Surehand.find_tasks and "
        "count_tasks with text) reads per query: the newest ones that pass the other filters. "
        "A page that ends there offers the next one; a count past it is a lower bound.",
    )
    metrics_token: str = Field(
        "",
        description="Bearer token for /metrics (the API's and a worker's metrics port). With "
        "SUREHAND_API_TOKENS set, the API's /metrics (which counts every tenant's TASKs) answers "
        "only this token; without API tokens (loopback only) it is open unless this is set.",
    )
    mcp_transport: str = Field(
        "stdio", description="`surehand mcp` transport: stdio (agent hosts) or http."
    )
    mcp_host: str = Field("127.0.0.1", description="Address `surehand mcp --transport http` binds.")
    mcp_port: int = Field(8001, ge=0, le=65535, description="Port of the MCP HTTP transport.")
    up_concurrency: int = Field(
        4, ge=1, description="Sessions `surehand up` runs at once (worker threads)."
    )
    metrics_port: int = Field(
        0,
        ge=0,
        le=65535,
        description="If set, `surehand worker` serves Prometheus /metrics on this port (the API "
        "and `surehand up` serve theirs at /metrics already); 0 turns it off.",
    )
    metrics_host: str = Field("127.0.0.1", description="Address of the worker's metrics port.")
    flower_host: str = Field("127.0.0.1", description="Address `surehand flower` binds.")
    flower_port: int = Field(5555, ge=1, le=65535, description="Port of `surehand flower`.")
    log_format: Literal["text", "json"] = Field(
        "text",
        description="text, or json: one JSON object per line on stdout (time, level, logger, "
        "message, task) for a log shipper; applies to `surehand worker`, `beat` and `api`.",
    )

    def resolved_database_url(self) -> str:
        return self.database_url or default_database_url(self.home)
