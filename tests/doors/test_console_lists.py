"""Every TASK is findable: the console's lists are filtered, searched, counted and paged in the
store, over all of a tenant's TASKs, on SQLite and Postgres alike.

Before: the board read the newest 300 TASKs of a bucket and filtered those in Python, so an
older TASK could not be found, a fuller bucket counted "300+", and nothing paged.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from surehand import Surehand
from surehand.config import Settings
from surehand.errors import ValidationFailed
from surehand.model import Bucket, Task
from surehand.model.listing import Count
from surehand.store import Store
from surehand.testing import ManualClock

SEEDED = 330  # more than the old board's 300 per bucket
PAGE = 40


def seed(store: Store, clock: ManualClock, tenant: str = "acme", n: int = SEEDED) -> Surehand:
    """``n`` inbox TASKs; every third shares its creation instant with the one before (ties
    must not break the paging order)."""
    sh = Surehand(database_url=store.url, tenant=tenant, clock=clock)
    for number in range(n):
        if number % 3:
            clock.advance(1)
        sh.write_task(
            sender="PM",
            recipient="QA" if number % 2 else "DEV",
            subject=f"Chore {number:04d}",
            body=f"Routine work item {number}." + (" Écrire le rapport." if number == 7 else ""),
            priority="P1" if number % 5 == 0 else "P2",
            client_submission_id=f"{tenant}-chore-{number}",
        )
    return sh


@pytest.fixture
def acme(store: Store, clock: ManualClock) -> Iterator[Surehand]:
    seed(store, clock, tenant="globex", n=25)  # another tenant's TASKs: never listed or counted
    sh = seed(store, clock)
    yield sh
    sh.close()


def walk(sh: Surehand, **search: object) -> list[Task]:
    """Every page from the newest on, following the older-cursor to the end."""
    seen: list[Task] = []
    after = None
    while True:
        page = sh.find_tasks(after=after, limit=PAGE, **search)
        seen.extend(page.tasks)
        if page.older is None:
            return seen
        after = page.older.encode()


def test_paging_walks_every_task_once_newest_first(acme: Surehand) -> None:
    seen = walk(acme, bucket=Bucket.INBOX)
    ids = [task.task_id for task in seen]
    assert len(ids) == SEEDED
    assert len(set(ids)) == SEEDED  # no duplicates, and with the count: no gaps
    order = [(task.created_at, task.task_id) for task in seen]
    assert order == sorted(order, reverse=True)
    assert {task.tenant for task in seen} == {"acme"}


def test_paging_back_from_the_last_page_gives_the_same_pages(acme: Surehand) -> None:
    forward = []
    after = None
    while True:
        page = acme.find_tasks(after=after, limit=PAGE)
        forward.append([task.task_id for task in page.tasks])
        if page.older is None:
            break
        after = page.older.encode()
    backward = [forward[-1]]
    before = acme.find_tasks(after=after, limit=PAGE).newer
    while before is not None:
        page = acme.find_tasks(before=before.encode(), limit=PAGE)
        backward.append([task.task_id for task in page.tasks])
        before = page.newer
    assert backward[::-1] == forward


def test_counts_are_exact_over_every_task(acme: Surehand) -> None:
    counts = acme.count_tasks()
    assert counts[Bucket.INBOX].value == SEEDED
    assert counts[Bucket.INBOX].exact
    assert counts[Bucket.DONE].value == 0
    by_role = acme.count_tasks(recipient="qa")  # roles in any case
    assert by_role[Bucket.INBOX].value == SEEDED // 2
    assert acme.count_tasks(priority="P1")[Bucket.INBOX].value == len(range(0, SEEDED, 5))


def test_search_finds_the_oldest_task_by_id_submission_subject_and_body(acme: Surehand) -> None:
    oldest = walk(acme)[-1]
    assert oldest.fields.subject == "Chore 0000"
    for text in (oldest.task_id, "acme-chore-0", "chore 0000", "ROUTINE WORK ITEM 0."):
        found = [task.task_id for task in walk(acme, text=text)]
        assert oldest.task_id in found, text
    assert [t.fields.subject for t in walk(acme, text="écrire LE")] == ["Chore 0007"]
    assert walk(acme, text="globex-chore") == []  # another tenant's submission ids


def test_a_search_counts_up_to_a_bound_and_says_so(acme: Surehand) -> None:
    exact = acme.count_tasks(text="chore 01")[Bucket.INBOX]
    assert (exact.value, exact.exact) == (100, True)
    assert acme.count_tasks(text="%")[Bucket.INBOX].value == 0  # wildcards are literal
    assert acme.count_tasks(text="_")[Bucket.INBOX].value == 0


def test_bad_cursors_and_filters_are_refused_naming_the_field(acme: Surehand) -> None:
    for field, value in (
        ("after", "not-a-cursor"),
        ("before", "123.evil"),
        ("recipient", "not a role"),
        ("priority", "P9"),
        ("text", "x" * 201),
        ("limit", 0),
    ):
        with pytest.raises(ValidationFailed) as caught:
            acme.find_tasks(**{field: value})
        assert caught.value.field == field


def test_a_search_reads_a_bounded_number_of_tasks_and_goes_on_from_there(
    store: Store, acme: Surehand
) -> None:
    """Before: a search that matched nothing read every body of the tenant, per bucket and
    per page, however many there were."""
    settings = Settings(database_url=store.url, tenant="acme", search_scan_rows=100)
    with Surehand(settings=settings) as bounded:
        first = bounded.find_tasks(text="chore 0000", limit=PAGE)
        assert first.tasks == []  # the newest 100 read, none matched
        assert first.scanned == 100
        assert first.older is not None  # ... and the next page searches on from there
        count = bounded.count_tasks(text="chore 0000")[Bucket.INBOX]
        assert (count.value, count.exact) == (0, False)  # a lower bound, and says so
        assert [t.fields.subject for t in walk(bounded, text="chore 0000")] == ["Chore 0000"]
        sparse = walk(bounded, text="chore 00")
    assert sparse == walk(acme, text="chore 00")  # the same TASKs in the same order...
    assert len(sparse) == len({t.task_id for t in sparse}) == 100  # ...each once
    assert acme.count_tasks(text="chore 0000")[Bucket.INBOX] == Count(1, exact=True)
