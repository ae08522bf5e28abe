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
This module runs the session; what it is launched with, how its program is watched and what
its end comes to are :mod:`.command_setup`, :mod:`.command_watch` and :mod:`.command_outcome`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from surehand.agents import quotas, session_dirs
from surehand.agents.briefing import brief_for
from surehand.agents.budgets import Budget, role_budget, spent_before
from surehand.agents.command_outcome import account, failure_reason, report_text
from surehand.agents.command_setup import preset_options, remote_names, session_env, with_clone
from surehand.agents.command_watch import wait_for_exit, watched_session
from surehand.agents.context import SessionContext
from surehand.agents.gateway import SessionNet
from surehand.agents.group_records import GroupRecord, GroupRecords
from surehand.agents.groups import AgentGroup
from surehand.agents.launch import Confinement, Launch
from surehand.agents.outputs import (
    OUTPUTS_DIR,
    captured,
    output_tails,
)
from surehand.agents.presets import (
    Invocation,
    Program,
    codex_sandbox,
    mcp_configs,
    operator_servers,
    program_for,
)
from surehand.agents.quota_watch import watch_for
from surehand.agents.sandbox import BWRAP
from surehand.agents.session_door import AgentGrant, SessionDoor, SessionDoorFactory
from surehand.agents.workspaces import Workspace, Workspaces, prepare, publish
from surehand.config import Settings
from surehand.errors import AgentError, ConfigError
from surehand.fcop.render import render_recovery, render_task
from surehand.store import Store

log = logging.getLogger(__name__)


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
        policy = with_clone(self.program.hook_policy(remote_names(workspace)), workspace)
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
                claude = account(self.program, ctx, stdout)
            output = claude.result if claude else report_text(self.program, work_dir, stdout)
            if claude is not None and claude.budget_spent and budget is not None:
                raise budget.spent_by(claude.usage)
            if code != 0:
                reason = failure_reason(claude, ctx.details["output"])
                raise AgentError(f"command exited with {code}: {reason}", exit_code=code)
        return output or f"(command exited 0 with no output; see {outputs})"

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
            watched = watched_session(
                ctx, (self.work_dir, work_dir), workspace, self.confinement.quota
            )
            group = self._start(ctx, work_dir, launch, *outputs)
            if self.confinement.sandbox.mode == BWRAP:
                watched.sandbox_pid = functools.partial(
                    quotas.sandbox_pid, group.pgid, group.started
                )
            watch_for(self.settings).watch(watched)
            try:
                code = wait_for_exit(group, ctx, watched, self.timeout)
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
        env = session_env(ctx, work_dir, grant)
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

    def _sweep(self) -> None:
        """Remove finished sessions' directories past their retention (at most once a minute);
        never sooner than a session may run."""
        retention = max(
            self.settings.session_retention_seconds, self.settings.command_timeout_seconds + 60
        )
        session_dirs.sweep(self.work_dir, retention=retention, keep=set(self.running))
