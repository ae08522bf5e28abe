"""TASK and REPORT documents: their front matter reads back, as YAML, exactly as written,
whatever text the fields hold."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from surehand.fcop.render import parse_front_matter, render_task
from surehand.model import TaskFields

CREATED = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=60)


@settings(max_examples=300, deadline=None)
@given(subject=TEXT, thread_key=TEXT, references=st.lists(TEXT, max_size=3), body=TEXT)
def test_front_matter_round_trips_any_text(
    subject: str, thread_key: str, references: list[str], body: str
) -> None:
    fields = TaskFields(
        sender="PM",
        recipient="DEV",
        subject=subject,
        body=body,
        thread_key=thread_key,
        references=tuple(references),
    )

    front = parse_front_matter(
        render_task("TASK-20261130-001", fields, created_at=CREATED, submission_id="s")
    )

    assert (front["subject"], front["thread_key"], front["references"]) == (
        subject,
        thread_key,
        references,
    )
    assert (front["protocol"], front["version"], front["priority"]) == ("fcop", 1, "P2")


def test_values_that_look_like_other_yaml_types_stay_strings() -> None:
    fields = TaskFields(sender="PM", recipient="DEV", subject="no", body="", thread_key="1.0")

    front = parse_front_matter(
        render_task("TASK-20261130-001", fields, created_at=CREATED, submission_id=None)
    )

    assert (front["subject"], front["thread_key"], front["parent"]) == ("no", "1.0", "")
