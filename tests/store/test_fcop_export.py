"""The FCoP workspace mirror: layout, front matter, moves, exact rebuilds, untouched folders."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from surehand.dispatcher import reports, submissions, transitions
from surehand.dispatcher.context import Services
from surehand.fcop.export import ExportSummary, export_workspace
from surehand.model import Action, Bucket


def new_task(services: Services, tenant: str = "t1", subject: str = "Mirror me") -> str:
    request = {"sender": "PM", "recipient": "DEV", "subject": subject, "body": "Body."}
    task_id = submissions.write_task(services, request, tenant=tenant).task_id
    assert task_id is not None
    return task_id


def claim(services: Services, task_id: str, tenant: str = "t1") -> None:
    transitions.transition(services, task_id, Action.CLAIM, actor="DEV", tenant=tenant)


def files(root: Path) -> dict[str, bytes]:
    """Every file under ``root``, by relative path."""
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def front_matter(path: Path) -> dict[str, Any]:
    _, header, _ = path.read_text(encoding="utf-8").split("---\n", 2)
    loaded = yaml.safe_load(header)
    assert isinstance(loaded, dict)
    return loaded


def test_an_export_writes_each_task_into_its_bucket(services: Services, tmp_path: Path) -> None:
    waiting = new_task(services)
    working = new_task(services)
    claim(services, working)
    summary = export_workspace(services.store, tmp_path)
    assert summary == ExportSummary(tasks=2, reports=0, removed=0)
    lifecycle_dir = tmp_path / "fcop" / "_lifecycle"
    assert sorted(p.name for p in lifecycle_dir.iterdir()) == sorted(b.value for b in Bucket)
    assert (lifecycle_dir / "inbox" / f"{waiting}-PM-to-DEV.md").is_file()
    assert (lifecycle_dir / "active" / f"{working}-PM-to-DEV.md").is_file()


def test_the_front_matter_carries_routing_and_the_transitions(
    services: Services, tmp_path: Path
) -> None:
    task_id = new_task(services)
    claim(services, task_id)
    export_workspace(services.store, tmp_path)
    front = front_matter(tmp_path / "fcop/_lifecycle/active" / f"{task_id}-PM-to-DEV.md")
    assert {"protocol", "version", "sender", "recipient", "priority", "transitions"} <= set(front)
    assert (front["protocol"], front["sender"], front["recipient"]) == ("fcop", "PM", "DEV")
    assert [(t["from"], t["to"], t["by"], t["tool"]) for t in front["transitions"]] == [
        (None, "inbox", "PM", "create"),
        ("inbox", "active", "DEV", "claim"),
    ]


def test_a_moved_task_is_in_exactly_one_bucket_after_the_next_export(
    services: Services, tmp_path: Path
) -> None:
    task_id = new_task(services)
    export_workspace(services.store, tmp_path)
    claim(services, task_id)
    summary = export_workspace(services.store, tmp_path)
    found = sorted(tmp_path.glob(f"fcop/_lifecycle/*/{task_id}-*.md"))
    assert [path.parent.name for path in found] == ["active"]
    assert summary.removed == 1


def test_reports_are_mirrored_with_their_revisions(services: Services, tmp_path: Path) -> None:
    task_id = new_task(services)
    claim(services, task_id)
    request = {"task_id": task_id, "reporter": "DEV", "body": "draft"}
    first = reports.write_report(services, request, tenant="t1").report
    second = reports.write_report(services, {**request, "body": "final"}, tenant="t1").report
    summary = export_workspace(services.store, tmp_path)
    assert (summary.tasks, summary.reports) == (1, 2)
    front = front_matter(tmp_path / "fcop/reports" / f"{second.report_id}-DEV-to-PM.md")
    assert (front["revision"], front["supersedes"]) == (2, first.report_id)
    assert front["references"] == [task_id]


def test_deleting_the_mirror_and_exporting_again_rebuilds_identical_bytes(
    services: Services, tmp_path: Path
) -> None:
    task_id = new_task(services)
    claim(services, task_id)
    reports.write_report(
        services, {"task_id": task_id, "reporter": "DEV", "body": "Done. ✓"}, tenant="t1"
    )
    new_task(services, subject="Still waiting")
    export_workspace(services.store, tmp_path)
    first = files(tmp_path)
    shutil.rmtree(tmp_path / "fcop")
    export_workspace(services.store, tmp_path)
    assert files(tmp_path) == first
    assert export_workspace(services.store, tmp_path).removed == 0


def test_an_export_never_touches_other_folders_or_foreign_files(
    services: Services, tmp_path: Path
) -> None:
    new_task(services)
    keep = {
        tmp_path / "fcop/shared/notes.md": b"team notes",
        tmp_path / "fcop/issues/ISSUE-20261130-001-DEV.md": b"an issue",
        tmp_path / "fcop/_lifecycle/inbox/README.txt": b"not a TASK",
        tmp_path / "elsewhere/TASK-20261130-099-PM-to-DEV.md": b"outside the mirror",
    }
    for path, data in keep.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    stale = tmp_path / "fcop/_lifecycle/done/TASK-20261130-099-PM-to-DEV.md"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"a TASK the store does not know")
    summary = export_workspace(services.store, tmp_path)
    assert summary.removed == 1
    assert not stale.exists()
    assert {path: path.read_bytes() for path in keep} == keep


def test_an_export_leaves_no_temp_files_behind(services: Services, tmp_path: Path) -> None:
    claim(services, new_task(services))
    export_workspace(services.store, tmp_path)
    assert not [path for path in tmp_path.rglob("*") if path.name.startswith(".")]


def test_a_tenant_scoped_export_mirrors_only_that_tenant(
    services: Services, tmp_path: Path
) -> None:
    mine = new_task(services, tenant="t1")
    theirs = new_task(services, tenant="t2")
    summary = export_workspace(services.store, tmp_path, tenant="t1")
    assert summary.tasks == 1
    assert list(tmp_path.glob(f"fcop/_lifecycle/inbox/{mine}-*.md"))
    assert not list(tmp_path.glob(f"fcop/_lifecycle/inbox/{theirs}-*.md"))


def test_an_invalid_tenant_is_refused_before_anything_is_written(
    services: Services, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="tenant"):
        export_workspace(services.store, tmp_path, tenant="../escape")
    assert not (tmp_path / "fcop").exists()
