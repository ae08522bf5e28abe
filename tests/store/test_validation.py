"""Bad input to write_task: a typed ValidationFailed naming the field, and nothing written.

Every case runs on each store backend and checks that no TASK, no receipt and no task number
came out of the refused call; the good edges (a 255-character id, a body of exactly 1 MiB)
are accepted.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from surehand.dispatcher.context import Services
from surehand.dispatcher.submissions import write_task
from surehand.errors import SurehandError, ValidationFailed
from surehand.facade import Surehand
from surehand.model import Disposition
from surehand.store import Store
from surehand.store.schema import metadata
from tests.submission_helpers import TENANT, counter_rows, counts, request

MIB = 1024 * 1024

BAD: list[tuple[str, dict[str, Any], str]] = [
    ("id of 256 characters", request(client_submission_id="a" * 256), "client_submission_id"),
    ("empty id", request(client_submission_id=""), "client_submission_id"),
    ("id with a space", request(client_submission_id="sub 1"), "client_submission_id"),
    ("id with a slash", request(client_submission_id="sub/1"), "client_submission_id"),
    ("id with unicode", request(client_submission_id="sub-é"), "client_submission_id"),
    ("id with a trailing newline", request(client_submission_id="sub-1\n"), "client_submission_id"),
    ("id that is not a string", request(client_submission_id=42), "client_submission_id"),
    ("body over 1 MiB in UTF-8", request(body="é" * (MIB // 2 + 1)), "body"),
    ("body over 1 MiB of ASCII", request(body="a" * (MIB + 1)), "body"),
    ("subject of 513 characters", request(subject="s" * 513), "subject"),
    ("blank subject", request(subject=" \t\n "), "subject"),
    ("empty subject", request(subject=""), "subject"),
    ("missing subject", {"sender": "PM", "recipient": "DEV"}, "subject"),
    ("priority P7", request(priority="P7"), "priority"),
    ("sender with a space", request(sender="dev team"), "sender"),
    ("lowercase sender", request(sender="dev"), "sender"),
    ("sender with a trailing newline", request(sender="DEV\n"), "sender"),
    ("reserved sender SYSTEM", request(sender="SYSTEM"), "sender"),
    ("lowercase recipient", request(recipient="qa"), "recipient"),
    ("lone surrogate in the body", request(body="ok \ud800"), "body"),
    ("lone surrogate in the subject", request(subject="Fix \udfff login"), "subject"),
    ("NUL in the body", request(body="a\x00b"), "body"),
    ("257 references", request(references=[f"r{i}" for i in range(257)]), "references"),
    ("depends_on item not a task id", request(depends_on=["fix-login"]), "depends_on"),
    ("depends_on item with a newline", request(depends_on=["TASK-20261130-001\n"]), "depends_on"),
    (
        "depends_on item with non-ASCII digits",
        request(depends_on=["TASK-\uff12\uff10\uff12\uff16\uff11\uff11\uff13\uff10-001"]),
        "depends_on",
    ),
    ("parent not a task id", request(parent="TASK-1"), "parent"),
    ("unknown risk level", request(risk_level="extreme"), "risk_level"),
    ("unknown extra field", request(assignee="DEV"), "assignee"),
]


@pytest.mark.parametrize(
    ("data", "field"), [pytest.param(data, field, id=name) for name, data, field in BAD]
)
def test_a_bad_request_is_refused_naming_the_field_and_writes_nothing(
    services: Services, data: dict[str, Any], field: str
) -> None:
    with pytest.raises(ValidationFailed) as refused:
        write_task(services, data, tenant=TENANT)
    assert refused.value.field == field
    assert refused.value.code == "invalid_request"
    assert str(refused.value).startswith(f"{field}: ")
    assert counts(services.store) == (0, 0)
    assert counter_rows(services.store) == []


@pytest.mark.parametrize("tenant", ["", "a b", "acme/eu", "é", "t" * 256, "acme\n"])
def test_an_invalid_tenant_is_refused_and_writes_nothing(services: Services, tenant: str) -> None:
    with pytest.raises(ValidationFailed) as refused:
        write_task(services, request(client_submission_id="sub-1"), tenant=tenant)
    assert refused.value.field == "tenant"
    assert counts(services.store) == (0, 0)


def test_an_id_of_exactly_255_allowed_characters_is_accepted(services: Services) -> None:
    submission_id = ("Az09._:-" * 32)[:255]
    result = write_task(services, request(client_submission_id=submission_id), tenant=TENANT)
    assert result.disposition is Disposition.CREATED
    assert result.client_submission_id == submission_id
    again = write_task(services, request(client_submission_id=submission_id), tenant=TENANT)
    assert again.disposition is Disposition.REUSED
    assert counts(services.store) == (1, 1)


@pytest.mark.parametrize("body", ["a" * MIB, "é" * (MIB // 2)], ids=["ascii", "two-byte"])
def test_a_body_of_exactly_1_mib_is_accepted(services: Services, body: str) -> None:
    result = write_task(services, request(body=body, client_submission_id="big"), tenant=TENANT)
    assert result.disposition is Disposition.CREATED
    assert counts(services.store) == (1, 1)


def test_a_subject_of_exactly_512_characters_is_accepted(services: Services) -> None:
    result = write_task(services, request(subject="s" * 512), tenant=TENANT)
    assert result.disposition is Disposition.CREATED
    assert counts(services.store) == (1, 0)


def test_256_references_are_accepted(services: Services) -> None:
    references = [f"r{i}" for i in range(256)]
    result = write_task(services, request(references=references), tenant=TENANT)
    assert result.disposition is Disposition.CREATED
    assert counts(services.store) == (1, 0)


# -- every string argument of the Python door, on both databases (issue 11) ----------------

GROWS = "\u0344"  # NFC turns it into two characters
HOSTILE = [
    "",
    " ",
    "\x00",
    "DEV\x00",
    "\ud800",
    "TASK-20260101-001\udfff",
    GROWS * 600,
    "é" * 300,
    "a" * 5000,
    "TASK-20260101-" + "1" * 19,
    "TASK-20260101-001",
    "REPORT-20260101-001",
    "CASE-20260101-001-1",
    "PM",
    "DEV",
    "SYSTEM",
    "Present",
    "present",
    "inbox",
    "claim",
    "P1",
]
TASK_FIELDS = {"sender": "PM", "recipient": "DEV", "subject": "Fix login"}
ANY_ID = "TASK-20260101-001"


def _write_task_with(name: str) -> Any:
    return lambda sh, s: sh.write_task({**TASK_FIELDS, name: s})


def _search_with(door: str, name: str, sh: Surehand, value: str) -> Any:
    return getattr(sh, door)(**{name: value})


NOT_FUZZED = {  # public methods of the Python door with a string argument, and why not here
    "agent": "registers a handler in this process; no request carries its role",
    "probe": "registers a probe in this process; no request carries its name",
}


CALLS: dict[str, Any] = {
    **{
        f"write_task.{name}": _write_task_with(name)
        for name in [
            "sender",
            "recipient",
            "subject",
            "body",
            "priority",
            "thread_key",
            "parent",
            "risk_level",
            "client_submission_id",
        ]
    },
    "write_task.references": lambda sh, s: sh.write_task({**TASK_FIELDS, "references": [s]}),
    "write_task.depends_on": lambda sh, s: sh.write_task({**TASK_FIELDS, "depends_on": [s]}),
    "write_report.task_id": lambda sh, s: sh.write_report(task_id=s, reporter="DEV", body="x"),
    "write_report.reporter": lambda sh, s: sh.write_report(task_id=ANY_ID, reporter=s, body="x"),
    "write_report.body": lambda sh, s: sh.write_report(task_id=ANY_ID, reporter="DEV", body=s),
    "write_report.status": lambda sh, s: sh.write_report(
        task_id=ANY_ID, reporter="DEV", body="x", status=s
    ),
    "write_report.recipient": lambda sh, s: sh.write_report(
        task_id=ANY_ID, reporter="DEV", body="x", recipient=s
    ),
    "write_report.client_submission_id": lambda sh, s: sh.write_report(
        task_id=ANY_ID, reporter="DEV", body="x", client_submission_id=s
    ),
    "transition.task_id": lambda sh, s: sh.transition(s, "claim", actor="DEV"),
    "transition.action": lambda sh, s: sh.transition(ANY_ID, s, actor="DEV"),
    "transition.actor": lambda sh, s: sh.transition(ANY_ID, "claim", actor=s),
    "transition.reason": lambda sh, s: sh.transition(ANY_ID, "reject", actor="PM", reason=s),
    "transition.report_id": lambda sh, s: sh.transition(ANY_ID, "submit", actor="DEV", report_id=s),
    "get_task": lambda sh, s: sh.get_task(s),
    "history": lambda sh, s: sh.history(s),
    "reports": lambda sh, s: sh.reports(s),
    "attempts": lambda sh, s: sh.attempts(s),
    "operations": lambda sh, s: sh.operations(s),
    "run_session": lambda sh, s: sh.run_session(s),
    "for_tenant": lambda sh, s: sh.for_tenant(s).list_tasks(),
    **{
        f"{door}.{name}": functools.partial(_search_with, door, name)
        for door in ("find_tasks", "count_tasks")
        for name in ("bucket", "recipient", "priority", "text", "after", "before")
    },
    "list_tasks.bucket": lambda sh, s: sh.list_tasks(bucket=s),
    "list_tasks.recipient": lambda sh, s: sh.list_tasks(recipient=s),
    "cases.state": lambda sh, s: sh.cases(state=s),
    "cases.task_id": lambda sh, s: sh.cases(task_id=s),
    "case": lambda sh, s: sh.case(s),
    "diagnose_submission": lambda sh, s: sh.diagnose_submission(s),
    "recover.task_id": lambda sh, s: sh.recover(s, actor="PM"),
    "recover.actor": lambda sh, s: sh.recover(ANY_ID, actor=s),
    "review.case_id": lambda sh, s: sh.review(s, effect="absent", note="x", actor="PM"),
    "review.effect": lambda sh, s: sh.review("CASE-20260101-001-1", effect=s, note="x", actor="PM"),
    "review.note": lambda sh, s: sh.review(
        "CASE-20260101-001-1", effect="absent", note=s, actor="PM"
    ),
    "review.actor": lambda sh, s: sh.review(
        "CASE-20260101-001-1", effect="absent", note="x", actor=s
    ),
    "raise_budget.task_id": lambda sh, s: sh.raise_budget(s, budget_usd=5, note="x", actor="PM"),
    "raise_budget.note": lambda sh, s: sh.raise_budget(ANY_ID, budget_usd=5, note=s, actor="PM"),
    "raise_budget.actor": lambda sh, s: sh.raise_budget(ANY_ID, budget_usd=5, note="x", actor=s),
    "cancel.task_id": lambda sh, s: sh.cancel(s, reason="x", actor="PM"),
    "cancel.reason": lambda sh, s: sh.cancel(ANY_ID, reason=s, actor="PM"),
    "cancel.actor": lambda sh, s: sh.cancel(ANY_ID, reason="x", actor=s),
    "pause_role.role": lambda sh, s: sh.pause_role(s, reason="x", actor="ADMIN"),
    "pause_role.reason": lambda sh, s: sh.pause_role("DEV", reason=s, actor="ADMIN"),
    "pause_role.actor": lambda sh, s: sh.pause_role("DEV", reason="x", actor=s),
    "resume_role.role": lambda sh, s: sh.resume_role(s, actor="ADMIN"),
    "resume_role.actor": lambda sh, s: sh.resume_role("DEV", actor=s),
    "children_tree": lambda sh, s: sh.children_tree(s),
    "release_hold.task_id": lambda sh, s: sh.release_hold(s, actor="PM"),
    "release_hold.actor": lambda sh, s: sh.release_hold(ANY_ID, actor=s),
}


def _answer(sh: Surehand, call: str, value: str) -> tuple[str, str | None]:
    """``ok``, or the typed error's code and field; any other exception fails the test."""
    try:
        CALLS[call](sh, value)
    except SurehandError as error:
        return error.code, error.details.get("field")
    return "ok", None


@pytest.fixture
def both_doors(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[Surehand]]:
    """The Python door on SQLite and on Postgres, side by side."""
    pg_store: Store = request.getfixturevalue("_pg_store")
    handles = [
        Surehand(database_url=f"sqlite:///{tmp_path / 'fuzz.sqlite3'}", tenant="fuzz"),
        Surehand(database_url=pg_store.url, tenant="fuzz"),
    ]
    for handle in handles:
        handle.store.ensure_schema()  # so that each example can empty it first
    yield handles
    for handle in handles:
        handle.close()


def empty(store: Store) -> None:
    """Every table of ``store`` emptied (but the row-id key, as ``truncate`` keeps it). DELETE,
    not TRUNCATE: on a few rows it costs a fraction of TRUNCATE's fixed price per table."""
    with store.engine.begin() as connection:
        for table in reversed(metadata.sorted_tables):
            kept = table.c.kind == "ROWIDS" if table.name == "counters" else None
            connection.execute(table.delete() if kept is None else table.delete().where(~kept))


# What the two databases' drivers refuse differently (Postgres cannot encode a lone surrogate
# and stores no NUL): every call meets each, so a door that skips validation shows at once.
ENCODINGS = ["\ud800", "\x00"]


def every_call_once(test: Callable[..., None]) -> Callable[..., None]:
    """An explicit example per call (a hostile value each, and each of ``ENCODINGS``),
    however the draws fall."""
    for number, call in enumerate(sorted(CALLS)):
        for value in {HOSTILE[number % len(HOSTILE)], *ENCODINGS}:
            test = example(call=call, value=value)(test)
    return test


def test_every_string_argument_of_the_python_door_is_fuzzed() -> None:
    """A public method taking a string (or request fields) has a call below, or a reason."""
    doors = {
        name
        for name, method in inspect.getmembers(Surehand, inspect.isfunction)
        if not name.startswith("_")
        and any(
            "str" in str(parameter.annotation) or parameter.annotation == "Any"
            for parameter in inspect.signature(method).parameters.values()
        )
    }
    fuzzed = {call.split(".")[0] for call in CALLS}
    assert doors - set(NOT_FUZZED) == fuzzed


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    call=st.sampled_from(sorted(CALLS)),
    value=st.one_of(
        st.sampled_from(HOSTILE), st.text(st.characters(exclude_categories=()), max_size=40)
    ),
)
@every_call_once
def test_any_text_for_any_string_argument_is_success_or_a_typed_error_alike_on_both_databases(
    both_doors: list[Surehand], call: str, value: str
) -> None:
    for sh in both_doors:
        empty(sh.store)  # each example starts from empty stores, not from earlier examples'
    sqlite, postgres = (_answer(sh, call, value) for sh in both_doors)
    assert sqlite == postgres
    code, field = sqlite
    if code == "invalid_request":
        assert field, f"{call}({value!r}) refused without naming a field"
