"""Every door that declares an effect takes a probe and its arguments, validated the same way:
``surehand effect --probe --probe-arg`` and the session MCP tool ``effect_begin`` (the Python
``ctx.operation`` is in test_probe_admission.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any, cast

import pytest

from surehand.agents.context import SessionContext, SessionPort
from surehand.dispatcher.claims import claim
from surehand.facade import Surehand
from surehand.mcp.session_server import SessionMcp
from tests.session_helpers import claimed, committed_task, operations_of
from tests.shared.cli import Cli
from tests.shared.session_mcp import call, granted, structured

COMMIT = "a" * 40
PUSH_ARGS = {"remote": "file:///srv/app.git", "ref": "main", "commit": COMMIT}


@pytest.fixture
def inside(cli: Cli) -> Iterator[tuple[dict[str, str], str]]:
    """What a session's program has (its grant's URL and token), and its TASK's id."""
    harness_sh = cli.sh
    task_id = str(harness_sh.write_task(sender="PM", recipient="DEV", subject="x").task_id)
    session = claim(harness_sh.services, task_id, worker="test", message_id=None)
    assert session is not None
    door = SessionMcp.shared(harness_sh.services)
    ctx = SessionContext(
        task=session.task, attempt=session.attempt, port=cast(SessionPort, None),
        cancelled=threading.Event(),
    )  # fmt: skip
    grant = door.grant(ctx)
    try:
        yield {"SUREHAND_MCP_URL": grant.url, "SUREHAND_MCP_TOKEN": grant.token}, task_id
    finally:
        door.stop()


def test_surehand_effect_records_the_probe_and_its_arguments(
    cli: Cli, inside: tuple[dict[str, str], str]
) -> None:
    env, task_id = inside
    probe = ["--probe", "git.push", "--probe-arg", "remote=file:///srv/app.git"]
    probe += ["--probe-arg", "ref=main", "--probe-arg", f"commit={COMMIT}"]
    assert cli("effect", "--name", "push", *probe, "--", "echo", "hi", env=env).stdout == "hi\n"
    [op] = cli.sh.operations(task_id)
    assert op.probe == "git.push"
    assert op.probe_args == {**PUSH_ARGS, "ref": "refs/heads/main"}


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--probe", "git.push", "--probe-arg", "ref"], "NAME=VALUE"),
        (["--probe", "git.push", "--probe-arg", "ref=main"], "probe_args"),
        (["--probe", "git.pushes"], "no built-in probe"),
        (["--probe-arg", "ref=main"], "need a probe"),
    ],
)
def test_surehand_effect_refuses_bad_probe_arguments_before_running_anything(
    cli: Cli, inside: tuple[dict[str, str], str], tmp_path: Any, options: list[str], said: str
) -> None:
    env, task_id = inside
    ran = tmp_path / "ran"
    done = cli("effect", "--name", "push", *options, "--", "touch", str(ran), env=env, code=None)
    assert done.returncode != 0
    assert said in done.stdout + done.stderr
    assert not ran.exists()
    assert cli.sh.operations(task_id) == []


def test_effect_begin_takes_probe_args_and_refuses_bad_ones_naming_the_field(
    harness_sh: Surehand, mcp: SessionMcp
) -> None:
    task_id = committed_task(harness_sh)
    grant, _ = granted(mcp, claimed(harness_sh.services, task_id))
    begin = {"name": "push", "args": {}, "probe": "git.push"}

    bad = call(grant, "effect_begin", {**begin, "probe_args": {**PUSH_ARGS, "commit": "HEAD"}})
    unknown = call(grant, "effect_begin", {**begin, "probe": "http.post", "probe_args": {}})
    good = call(grant, "effect_begin", {**begin, "probe_args": PUSH_ARGS})

    assert bad.is_error
    assert structured(bad)["error"]["field"] == "probe_args"
    assert "commit" in structured(bad)["error"]["detail"]
    assert structured(unknown)["error"]["field"] == "probe"
    assert structured(good)["status"] == "begun"
    [op] = operations_of(harness_sh.store, task_id)
    assert (op.probe, op.probe_args) == ("git.push", {**PUSH_ARGS, "ref": "refs/heads/main"})
