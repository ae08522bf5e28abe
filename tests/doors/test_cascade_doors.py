"""Cascades on the doors (both databases): the console's TASK page shows the tree of children
with buckets and holds and "child TASK-… held: …", and its approver runs a TASK held by a
cancelled dependency anyway; HTTP ``POST /v1/tasks/{id}/release`` and the MCP ``release_task``
do the same.
"""

from __future__ import annotations

import html
from typing import Any

import anyio
import pytest
from fastapi import FastAPI
from mcp import Client

from surehand.config import Settings
from surehand.facade import Surehand
from surehand.mcp.tools import build_server
from surehand.model import Bucket, EventKind
from tests.recovery_helpers import Rig
from tests.shared.ui import TOKENS, browser, sign_in

pytestmark = pytest.mark.rig(api_tokens=TOKENS)


def held_tree(rig: Rig) -> tuple[str, str, str, str]:
    """A parent with DEV and QA children (QA depends on DEV) and a grandchild under QA; DEV
    is cancelled, so QA is held. Returns (parent, dev, qa, grandchild)."""
    parent = rig.new_task(sender="PM", recipient="DEV")
    dev = rig.new_task(sender="DEV", recipient="OPS", parent=parent)
    qa = rig.new_task(sender="DEV", recipient="QA", parent=parent, depends_on=[dev])
    grandchild = rig.new_task(sender="QA", recipient="OPS", parent=qa)
    rig.sh.cancel(dev, reason="wrong approach")
    return parent, dev, qa, grandchild


def test_the_parents_page_shows_the_tree_and_its_held_child(rig_app: FastAPI, rig: Rig) -> None:
    parent, dev, qa, grandchild = held_tree(rig)
    client = browser(rig_app)
    sign_in(client, "pm")

    page = html.unescape(client.get(f"/ui/tasks/{parent}").text)

    assert f"child {qa} held: dependency {dev} was cancelled (wrong approach)" in page
    assert 'id="children-tree"' in page
    for task_id, depth in ((dev, 1), (qa, 1), (grandchild, 2)):
        assert f'data-task="{task_id}" data-depth="{depth}"' in page
    assert 'data-bucket="archive"' in page


def test_the_approver_runs_the_held_dependant_anyway_from_its_page(
    rig_app: FastAPI, rig: Rig
) -> None:
    _parent, dev, qa, _grandchild = held_tree(rig)
    client = browser(rig_app)
    csrf = sign_in(client, "pm")
    page = html.unescape(client.get(f"/ui/tasks/{qa}").text)
    assert 'id="release-form"' in page
    assert f'href="/ui/tasks/{dev}"' in page

    answer = client.post(f"/ui/tasks/{qa}/release", data={"csrf_token": csrf})

    assert answer.status_code == 303
    assert rig.task(qa).hold is None
    [released] = rig.events(qa, EventKind.HOLD_RELEASED)
    assert released.by == "PM"


def test_http_release_is_the_approvers_alone(rig_app: FastAPI, rig: Rig) -> None:
    _parent, _dev, qa, _grandchild = held_tree(rig)
    dev_client = browser(rig_app)
    dev_client.headers["Authorization"] = "Bearer dev"
    refused = dev_client.post(f"/v1/tasks/{qa}/release")
    assert refused.status_code == 403
    assert rig.task(qa).hold is not None

    pm_client = browser(rig_app)
    pm_client.headers["Authorization"] = "Bearer pm"
    answer = pm_client.post(f"/v1/tasks/{qa}/release")
    assert answer.status_code == 200, answer.text
    assert answer.json()["task"]["hold"] is None
    assert answer.json()["task"]["bucket"] == Bucket.INBOX.value
    again = pm_client.post(f"/v1/tasks/{qa}/release")
    assert (again.status_code, again.json()["code"]) == (409, "illegal_transition")


def test_mcp_release_task_runs_the_held_dependant_anyway(rig: Rig) -> None:
    _parent, dev, qa, _grandchild = held_tree(rig)
    sh = Surehand(settings=Settings(database_url=rig.store.url))

    async def session() -> tuple[Any, Any]:
        async with Client(build_server(sh)) as mcp:
            released = await mcp.call_tool("release_task", {"task_id": qa})
            again = await mcp.call_tool("release_task", {"task_id": qa})
            return released, again

    try:
        released, again = anyio.run(session)
    finally:
        sh.close()
    assert released.structured_content["hold"] is None
    assert again.is_error
    assert again.structured_content["error"]["code"] == "illegal_transition"
    [event] = rig.events(qa, EventKind.HOLD_RELEASED)
    assert event.reason == f"run anyway without {dev}"
