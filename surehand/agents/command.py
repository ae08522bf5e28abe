"""The built-in ``command`` agent: runs a program (e.g. an agent CLI) for each session.

The program runs in a per-session working directory (mode 0700) that holds the TASK as an FCoP
markdown file (``TASK.md``), with ``SUREHAND_*`` variables naming its TASK and attempt, and
nothing else of the worker's environment (:mod:`surehand.agents.environment`): no store, broker
or Redis URL, no token but its session's. ``surehand effect -- <cmd>`` inside it declares side
effects through the session MCP server. Its standard output becomes the REPORT; a non-zero exit
or a timeout fails the attempt (which is never retried blindly).

It runs confined (:mod:`surehand.agents.launch`): in a bubblewrap sandbox where the host allows
it (its own PID namespace; the surehand home, other sessions and local service sockets hidden;
everything but its directory read-only; a network of its own that reaches its session server
and, through the worker's allowlisting proxy, only the hosts an operator lists:
:mod:`surehand.agents.network`), with resource limits and a session cgroup, optionally as
another user. Its outputs are read without trusting what it can touch
(:mod:`surehand.agents.outputs`).

An LLM agent declares its effects itself through the session MCP server
(``surehand.mcp.session_server``, handed in as a ``SessionDoorFactory``): the session gets a
grant (``SUREHAND_MCP_URL``, ``SUREHAND_MCP_TOKEN``, and ``.mcp.json`` in its directory) that is
revoked when the session ends. A successor of an interrupted attempt finds a "Recovery" section
in its ``TASK.md`` (``surehand.agents.briefing``). ``SUREHAND_COMMAND_AGENT=claude`` or
``codex`` runs that CLI with a preset command line (``surehand.agents.presets``), in the
workspace ``SUREHAND_AGENT_WORKSPACE`` names if any; a preset whose requirements are missing
(the ``mcp`` extra, the CLI on PATH) is a ConfigError at worker start
(:meth:`CommandAgent.require_ready`).

The program cannot outlive its session: it runs in a process group of its own, led by a
trampoline that kills the group if the worker process dies (``surehand.agents.reaper``), and the
whole group is stopped when the session loses its lease, times out, or ends, and on a cold
shutdown (``surehand.agents.groups``). No program of a later attempt starts on this host while
an earlier attempt's group of the same TASK is alive (``surehand.agents.group_records``).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from surehand.agents import quotas, session_dirs
from surehand.agents.accounting import ClaudeResult, claude_result, codex_model, codex_usage
from surehand.agents.briefing import brief_for
from surehand.agents.budgets import Budget, role_budget, spent_before
from surehand.agents.claude_hook import HookPolicy
from surehand.agents.context import SessionContext
from surehand.agents.gateway import SessionNet
from surehand.agents.git_rules import DEFAULT_REMOTES
from surehand.agents.group_records import GroupRecord, GroupRecords
from surehand.agents.groups import AgentGroup
from surehand.agents.launch import Confinement, Launch
from surehand.agents.outputs import (
    OUTPUTS_DIR,
    TAIL,
    captured,
    output_tails,
    read_report_file,
    tail_of,
)
from surehand.agents.presets import (
    TOKEN_ENV,
    URL_ENV,
    Invocation,
    PresetOptions,
    Program,
    codex_sandbox,
    mcp_configs,
    operator_servers,
    program_for,
)
from surehand.agents.quota_watch import watch_for
from surehand.agents.recognisers import Clone
from surehand.agents.sandbox import BWRAP
from surehand.agents.session_door import AgentGrant, SessionDoor, SessionDoorFactory
from surehand.agents.workspaces import Workspace, Workspaces, prepare, publish
from surehand.config import Settings
from surehand.errors import AgentError, ConfigError
from surehand.fcop.render import render_recovery, render_task
from surehand.store import Store

log = logging.getLogger(__name__)

_POLL = 0.1
# The longest a waiting session sleeps even when its program's end and its cancellation both
# wake it: a safety net should a wake-up ever be missed, not a poll (1,000 sessions: 17/s).
_SAFETY_NAP = 60.0
# From SIGTERM to SIGKILL for a program whose session was stopped on purpose (a cancel, a time
# limit): a moment to clean up, short enough that a cancel ends the whole tree within seconds.
STOPPED_GRACE_SECONDS = 2.0


class CommandAgent:
    """Runs ``argv`` once per session; ``timeout`` seconds at most."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        settings: Settings,
        timeout: float,
        program: Program | None = None,
        session_door: SessionDoorFactory | None = None,
    ) -> None:
        if not argv:
            raise ConfigError("the command agent needs a program: set SUREHAND_COMMAND_AGENT")
        self.argv = list(argv)
        self.program = program or Program(None, self.argv)
        self.settings = settings
        self.timeout = timeout
        self.session_door = session_door
        self.work_dir = settings.work_dir.resolve()
        self.records = GroupRecords(self.work_dir)
        self.running: set[str] = set()  # this process's sessions (never swept)

    @classmethod
    def from_settings(
        cls, settings: Settings, session_door: SessionDoorFactory | None = None
    ) -> CommandAgent:
        """The agent ``SUREHAND_COMMAND_AGENT`` names; ``session_door`` serves its tools."""
        program = program_for(settings.command_agent, preset_options(settings))
        return cls(
            program.base,
            settings=settings,
            timeout=settings.command_timeout_seconds,
            program=program,
            session_door=session_door,
        )

    def __call__(self, ctx: SessionContext) -> str:
        mcp = self.mcp
        workspace = self._workspace(ctx)
        policy = _with_clone(self.program.hook_policy(_remote_names(workspace)), workspace)
        grant = mcp.grant(ctx, policy) if mcp is not None else None
        self.running.add(ctx.attempt.attempt_id)
        try:
            return self._session(ctx, grant, workspace)
        finally:
            self.running.discard(ctx.attempt.attempt_id)
            if mcp is not None and grant is not None:
                mcp.revoke(grant)  # the token dies with the session
            self._sweep()

    @functools.cached_property
    def confinement(self) -> Confinement:
        """How this process confines programs (resolved once; ConfigError if it cannot)."""
        return Confinement.from_settings(self.settings, self.program.base)

    def require_ready(self) -> None:
        """ConfigError now (worker start, ``surehand check``) if this agent's program cannot
        run as configured: its confinement, a preset's session server, extra and CLI, and the
        session server's port (it starts listening here: a port range with no free port stops
        the worker at start, not its first session)."""
        _ = self.confinement
        _ = self.workspaces
        if self.program.preset is not None:
            self._require_preset()
        if self.mcp is not None:
            self.mcp.door()

    def _require_preset(self) -> None:
        if not self.settings.session_mcp:
            raise ConfigError(
                f"the {self.program.preset} preset works through the session MCP server: set "
                "SUREHAND_SESSION_MCP=true",
                setting="SUREHAND_SESSION_MCP",
            )
        _ = self.mcp  # ConfigError without the mcp extra
        _ = self.operator_servers
        self._require_codex_home()
        cli = self.program.base[0]
        if shutil.which(cli, path=os.environ.get("PATH")) is None:
            raise ConfigError(
                f"the {self.program.preset} preset runs {cli!r}, which is not on PATH here "
                "(npm install -g @anthropic-ai/claude-code or @openai/codex, or name the "
                "program's path after the preset)",
                setting="SUREHAND_COMMAND_AGENT",
            )

    def _require_codex_home(self) -> None:
        """Codex's own sandbox needs helper binaries in ``CODEX_HOME`` (the session's home) and
        refuses to make them under the temporary directory: its shell commands would fail."""
        if self.program.preset != "codex":
            return
        session = self._invocation(self.work_dir, None)
        if codex_sandbox(self.settings.codex_sandbox, session) == "danger-full-access":
            return
        temp = Path(tempfile.gettempdir()).resolve()
        if self.work_dir == temp or temp in self.work_dir.parents:
            raise ConfigError(
                f"Codex's own sandbox refuses to put its helpers under {temp}, where "
                f"SUREHAND_WORK_DIR ({self.work_dir}) keeps the sessions' homes: set "
                "SUREHAND_WORK_DIR elsewhere (or run in the bwrap sandbox)",
                setting="SUREHAND_WORK_DIR",
            )

    @functools.cached_property
    def operator_servers(self) -> dict[str, Any]:
        """The operator's MCP servers for the claude preset (read once; ConfigError)."""
        if self.program.preset != "claude":
            return {}
        return operator_servers(self.program.options.claude_mcp_configs)

    @functools.cached_property
    def workspaces(self) -> Workspaces:
        """Where sessions work, per role (``SUREHAND_AGENT_WORKSPACE``; ConfigError)."""
        return Workspaces.parse(self.settings.agent_workspace)

    def _workspace(self, ctx: SessionContext) -> Workspace | None:
        spec = self.workspaces.for_role(ctx.task.fields.recipient)
        return None if spec is None else prepare(spec, ctx.task.task_id, self.work_dir)

    @functools.cached_property
    def mcp(self) -> SessionDoor | None:
        """This process's session MCP server (None when turned off or, for a program that is
        not a preset, without the mcp extra; a preset without it is a ConfigError)."""
        if not self.settings.session_mcp:
            return None
        if self.session_door is None:
            if self.program.preset is not None:
                raise ConfigError(
                    f"the {self.program.preset} preset needs the session MCP server, which "
                    "needs the mcp extra: pip install 'surehand[mcp]'",
                    setting="SUREHAND_COMMAND_AGENT",
                )
            log.warning(
                "command agents get no session MCP server: install surehand[mcp] (or set "
                "SUREHAND_SESSION_MCP=false to say so)"
            )
            return None
        return self.session_door(self.settings)

    @functools.cached_property
    def store(self) -> Store:
        """The store the briefing of a successor is read from (engines shared per process)."""
        return Store.from_settings(self.settings)

    def _session(
        self, ctx: SessionContext, grant: AgentGrant | None, workspace: Workspace | None
    ) -> str:
        budget = self._budget(ctx)
        work_dir = self._prepare(ctx, grant)
        outputs = self.work_dir / OUTPUTS_DIR / ctx.attempt.attempt_id
        with captured(outputs) as (stdout, stderr):  # cut to what is read of them, after
            try:
                code = self._run(ctx, work_dir, (grant, workspace, budget), (stdout, stderr))
            finally:  # also when it was stopped (timed out, cancelled, over its quota)
                ctx.note(output=output_tails(stdout, stderr))
                claude = self._account(ctx, stdout)
            output = claude.result if claude else self._report_text(work_dir, stdout)
            if claude is not None and claude.budget_spent and budget is not None:
                raise budget.spent_by(claude.usage)
            if code != 0:
                reason = _claude_reason(claude) or _reason(ctx.details["output"])
                raise AgentError(f"command exited with {code}: {reason}", exit_code=code)
        return output or f"(command exited 0 with no output; see {outputs})"

    def _account(self, ctx: SessionContext, stdout: IO[bytes]) -> ClaudeResult | None:
        """Note what the CLI said it spent (its own accounting) and, for Claude Code, its
        final result message; the parsed result (None: not Claude Code's JSON)."""
        text = tail_of(stdout)
        if self.program.preset == "codex":
            usage = codex_usage(text, codex_model(self.program.base))
            if usage is not None:
                ctx.note(usage=usage)
            return None
        if self.program.preset != "claude":
            return None
        claude = claude_result(text)
        if claude is None:
            return None
        ctx.details.setdefault("output", {})["result"] = claude.result[-TAIL:]
        if claude.usage is not None:
            ctx.note(usage=claude.usage)
        return claude

    def _budget(self, ctx: SessionContext) -> Budget | None:
        """What the TASK may still spend (its own budget_usd, else its role's default), from
        what its earlier attempts spent; raises ``budget_spent`` if nothing is left."""
        limit = ctx.task.budget_usd
        if limit is None:
            limit = role_budget(self.settings, ctx.task.fields.recipient)
        if limit is None:
            return None
        budget = Budget(limit, spent_before(self.store, ctx.task.task_id))
        if budget.left <= 0:
            raise budget.spent_by(None)
        return budget

    @property
    def effects_observed(self) -> str | None:
        """How this program's effects are observed (``Attempt.details``): the claude preset's
        hooks journal its effectful calls (``journaled``); any other program only declares
        what it chooses to (None: its failures are held, unless its role is declared)."""
        hooked = self.program.preset == "claude" and self.program.options.claude_hooks
        return "journaled" if hooked and self.settings.session_mcp else None

    def _report_text(self, work_dir: Path, stdout: IO[bytes]) -> str:
        """The program's final message (a preset's report file), else its standard output."""
        report_file = self.program.report_file
        if report_file is not None and (text := read_report_file(work_dir, report_file)):
            return text
        return tail_of(stdout)

    def _run(
        self,
        ctx: SessionContext,
        work_dir: Path,
        given: tuple[AgentGrant | None, Workspace | None, Budget | None],
        outputs: tuple[IO[bytes], IO[bytes]],
    ) -> int:
        """Run the program's process group to its end, its disk use watched (``given``: the
        session's grant, workspace and budget; ``outputs``: its standard output and error);
        its exit code."""
        grant, workspace, budget = given
        door = self.mcp.door() if grant is not None and self.mcp is not None else None
        label = f"{ctx.task.task_id} attempt {ctx.attempt.number}"
        with self.confinement.net.session(label, door) as network:  # its ways out end with it
            launch = self._launch(ctx, work_dir, (grant, workspace, budget), network)
            watched = self._watched(ctx, work_dir, workspace)  # its baseline, before it starts
            group = self._start(ctx, work_dir, launch, *outputs)
            if self.confinement.sandbox.mode == BWRAP:
                watched.sandbox_pid = functools.partial(
                    quotas.sandbox_pid, group.pgid, group.started
                )
            watch_for(self.settings).watch(watched)
            try:
                code = self._wait(group, ctx, watched)
            finally:
                watch_for(self.settings).forget(watched)
                group.stop()  # whatever the program left running dies with the session
                ours = self.records.release(ctx.task.task_id, ctx.attempt.attempt_id)
                watched.check()  # the last word: what it left once all of it stopped
                if watched.exceeded is not None:
                    shutil.rmtree(work_dir, ignore_errors=True)  # the flood goes with it
                elif workspace is not None:
                    publish(workspace)  # only once nothing of the program runs in the clone
        watched.raise_if_over()  # also one that ended between two rounds of the watch
        if not ours:
            raise AgentError("a later attempt of this TASK started here; this command was killed")
        return code

    def _watched(
        self, ctx: SessionContext, work_dir: Path, workspace: Workspace | None
    ) -> quotas.Watched:
        """The session under its quota, its baseline measured now (before it starts)."""
        places = [work_dir, self.work_dir / OUTPUTS_DIR / ctx.attempt.attempt_id]
        places += [path for path, _ in workspace.binds] if workspace is not None else []
        name, quota = ctx.attempt.attempt_id, self.confinement.quota
        return quotas.watched_session(name, places, within=self.work_dir, quota=quota)

    def _launch(
        self,
        ctx: SessionContext,
        work_dir: Path,
        given: tuple[AgentGrant | None, Workspace | None, Budget | None],
        network: SessionNet | None,
    ) -> Launch:
        grant, workspace, budget = given
        session = self._invocation(work_dir, grant, workspace)
        if budget is not None:
            session = dataclasses.replace(session, budget_usd=budget.left)
        env = self._session_env(ctx, work_dir, grant)
        if workspace is not None:
            env["SUREHAND_WORKSPACE"] = str(workspace.path)
        return self.confinement.launch(
            self.program.argv(session),
            name=ctx.attempt.attempt_id,
            session_dir=work_dir,
            session_env=env,
            network=network,
            program_env=self.program.env(session),
            workspace=workspace.binds if workspace is not None else (),
        )

    def _invocation(
        self, work_dir: Path, grant: AgentGrant | None, workspace: Workspace | None = None
    ) -> Invocation:
        return Invocation(
            session_dir=work_dir,
            mcp_url=grant.url if grant else None,
            workspace=workspace.path if workspace is not None else None,
            sandboxed=self.confinement.sandbox.mode == BWRAP,
        )

    def _start(
        self,
        ctx: SessionContext,
        work_dir: Path,
        launch: Launch,
        stdout: IO[bytes],
        stderr: IO[bytes],
    ) -> AgentGroup:
        """Start the program once no earlier attempt's group of this TASK runs on this host."""
        with self.records.slot(ctx.task.task_id) as slot:
            slot.clear_for(ctx.attempt)
            group = AgentGroup.start(
                launch.argv,
                cwd=work_dir,
                env=launch.env,
                stdout=stdout,
                stderr=stderr,
                trampoline=launch.trampoline,
                cgroup=launch.cgroup,
            )
            slot.write(GroupRecord.of(group, ctx.attempt))
        return group

    def _prepare(self, ctx: SessionContext, grant: AgentGrant | None) -> Path:
        _ = self.confinement  # resolved first: it makes the work directory reachable, or says why
        work_dir = session_dirs.make_private(self.work_dir / ctx.attempt.attempt_id)
        document = render_task(
            ctx.task.task_id,
            ctx.task.fields,
            created_at=ctx.task.created_at,
            submission_id=ctx.task.client_submission_id,
        )
        brief = brief_for(self.store, ctx.task.task_id, ctx.attempt)
        if brief.interruptions or brief.children:  # what earlier attempts did, from the records
            document += "\n" + render_recovery(brief.to_dict())
        session_dirs.write_private(work_dir, "TASK.md", document)
        session_dirs.make_private(work_dir / "home")
        if self.program.preset == "codex":
            session_dirs.make_private(work_dir / "home" / ".codex")  # its CODEX_HOME
        if grant is not None:
            for name, text in mcp_configs(grant.url, self.operator_servers).items():
                session_dirs.make_private((work_dir / name).parent)
                session_dirs.write_private(work_dir, name, text)
        session_dirs.give_to(work_dir, self.confinement.owner)
        return work_dir

    @staticmethod
    def _session_env(
        ctx: SessionContext, work_dir: Path, grant: AgentGrant | None
    ) -> dict[str, str]:
        env = {
            "SUREHAND_TASK_ID": ctx.task.task_id,
            "SUREHAND_ATTEMPT_ID": ctx.attempt.attempt_id,
            "SUREHAND_ATTEMPT": str(ctx.attempt.number),
            "SUREHAND_TASK_FILE": str(work_dir / "TASK.md"),
            "SUREHAND_SESSION_DIR": str(work_dir),
            "SUREHAND_ROLE": ctx.task.fields.recipient,
            "SUREHAND_TENANT": ctx.task.tenant,
        }
        if grant is not None:
            env.update({URL_ENV: grant.url, TOKEN_ENV: grant.token})
        return env

    def _wait(self, group: AgentGroup, ctx: SessionContext, watched: quotas.Watched) -> int:
        """The program's exit code, once it ends; stops it when the session is cancelled, the
        timeout passes or it goes over its quota. Sleeps until one of them happens: the
        program's end, the session's cancellation and the quota watch all set ``wake`` (see
        :mod:`surehand.agents.exits`); only where one of them cannot does it look every
        ``_POLL`` seconds."""
        deadline = time.monotonic() + self.timeout
        wake = watched.wake
        with group.waking(wake) as on_end, ctx.waking(wake) as on_cancel:
            nap = _SAFETY_NAP if on_end and on_cancel else _POLL
            while True:
                wake.clear()  # before looking: whatever happens from here on sets it again
                if (code := group.poll()) is not None:
                    break
                self._stop_if_over(group, ctx, deadline, watched)
                left = deadline - time.monotonic()
                wake.wait(min(nap, left))
        if group.interrupted:
            ctx.interrupt()  # an interruption, not the agent's failure: the attempt is not failed
            raise AgentError("the worker shut down; the command was stopped")
        return code

    def _stop_if_over(
        self, group: AgentGroup, ctx: SessionContext, deadline: float, watched: quotas.Watched
    ) -> None:
        """Stop the program if its session was cancelled or its time is up (AgentError), or
        it went over its disk quota (killed at once: SessionInterrupted)."""
        if watched.exceeded is not None:
            group.kill()  # at once: no grace to write more in
            watched.raise_if_over()
        if ctx.cancelled:
            group.stop(STOPPED_GRACE_SECONDS if ctx.stop_reason else None)
            why = ctx.stopped[1] if ctx.stopped else ctx.stop_reason or "the session lost its lease"
            raise AgentError(f"{why}; the command was stopped")
        if time.monotonic() > deadline:
            group.stop()
            raise AgentError(f"command timed out after {self.timeout:g}s and was stopped")

    def _sweep(self) -> None:
        """Remove finished sessions' directories past their retention (at most once a minute);
        never sooner than a session may run."""
        retention = max(
            self.settings.session_retention_seconds, self.settings.command_timeout_seconds + 60
        )
        session_dirs.sweep(self.work_dir, retention=retention, keep=set(self.running))


def _with_clone(policy: HookPolicy | None, workspace: Workspace | None) -> HookPolicy | None:
    """The hooks' policy with the TASK's clone, whose pushes they recognise."""
    if policy is None or workspace is None or workspace.repo is None:
        return policy
    return dataclasses.replace(policy, clone=Clone(workspace.path, workspace.remotes))


def _claude_reason(claude: ClaudeResult | None) -> str:
    """Why Claude Code says it failed: its errors, else its final message (its JSON is no
    reason a person reads)."""
    if claude is None:
        return ""
    said = "; ".join(claude.errors) or claude.result
    return f"{claude.subtype}: {said}"[-500:] if claude.subtype else said[-500:]


def _reason(output: dict[str, str]) -> str:
    """What a failed program said last: its error output's end, else its output's."""
    said = (output.get("stderr") or "").strip() or (output.get("stdout") or "").strip()
    return said[-500:]


def _remote_names(workspace: Workspace | None) -> tuple[str, ...]:
    """The remotes a scoped push rule lets the session push to: its clone's (the
    repository's), else ``origin`` (a shared directory's remotes the worker never reads)."""
    if workspace is None or workspace.repo is None:
        return DEFAULT_REMOTES
    return tuple(name for name, _url in workspace.remotes)


def preset_options(settings: Settings) -> PresetOptions:
    """What the settings let a preset do (tools, MCP configs, hooks, Codex's sandbox)."""

    def items(text: str) -> tuple[str, ...]:
        return tuple(part.strip() for part in text.split(",") if part.strip())

    return PresetOptions(
        claude_tools=items(settings.claude_tools),
        claude_mcp_configs=items(settings.claude_mcp_config),
        claude_hooks=settings.claude_hooks,
        effectful=items(settings.claude_effectful),
        read_only_commands=items(settings.claude_read_only_commands),
        codex_sandbox=settings.codex_sandbox,
        hook_timeout=settings.claude_hook_timeout_seconds,
    )
