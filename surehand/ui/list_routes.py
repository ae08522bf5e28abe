"""The console's lists: the board, a bucket's pages, the held queue, and the go-to box.

Each page has a ``/live`` twin that renders its changing part alone, for the page's refresh
(``static/console.js``); a live request does not count as use of the session.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import RedirectResponse, Response

from surehand.model import Bucket
from surehand.ui import lists
from surehand.ui.routes import Text, Viewer, console_of, render, signed_in
from surehand.ui.signin import PREFIX

router = APIRouter()
Cursor = Annotated[str | None, Query(max_length=64)]


def _wanted(
    request: Request, viewer: Viewer, recipient: str, priority: str, q: str
) -> lists.Wanted:
    """The filters asked for; a text search spends one of the viewer's searches (429 past
    SUREHAND_CONSOLE_SEARCHES_PER_MINUTE: each reads up to SUREHAND_SEARCH_SCAN_ROWS bodies
    per bucket)."""
    wanted = lists.Wanted(recipient, priority, q)
    if wanted.text.strip():
        console_of(request).searches.take(viewer.principal, "console searches")
    return wanted


@router.get("/", name="board")
def board(request: Request, recipient: Text = "", priority: Text = "", q: Text = "") -> Response:
    """Held cases first (most urgent first), then every bucket's count and newest TASKs."""
    viewer = signed_in(request)
    wanted = _wanted(request, viewer, recipient, priority, q)
    return render(
        request, "board.html", viewer, board=lists.board(viewer.sh, wanted), wanted=wanted
    )


@router.get("/board/live")
def board_live(
    request: Request, recipient: Text = "", priority: Text = "", q: Text = ""
) -> Response:
    """The board's changing part alone, for the page's refresh."""
    viewer = signed_in(request, touch=False)
    wanted = _wanted(request, viewer, recipient, priority, q)
    return render(
        request, "_board.html", viewer, board=lists.board(viewer.sh, wanted), wanted=wanted
    )


@router.get("/list/{bucket}", name="bucket")
def bucket_list(
    request: Request,
    bucket: Bucket,
    recipient: Text = "",
    priority: Text = "",
    q: Text = "",
    after: Cursor = None,
    before: Cursor = None,
) -> Response:
    """Every matching TASK of one bucket, newest first, a page at a time (keyset: no TASK is
    skipped or shown twice however many arrive meanwhile)."""
    viewer = signed_in(request)
    wanted = _wanted(request, viewer, recipient, priority, q)
    page, count = lists.bucket_page(viewer.sh, bucket, wanted, after, before)
    return render(
        request,
        "bucket.html",
        viewer,
        bucket=bucket.value,
        page=page,
        count=count,
        wanted=wanted,
        per_page=lists.PER_PAGE,
        scan=viewer.sh.settings.search_scan_rows,
    )


@router.get("/held", name="held")
def held(request: Request) -> Response:
    """Every case held for review, P0 first, then the longest waiting; refreshed live."""
    viewer = signed_in(request)
    return render(request, "held.html", viewer, items=lists.held(viewer.sh))


@router.get("/held/live")
def held_live(request: Request) -> Response:
    viewer = signed_in(request, touch=False)
    return render(request, "_held.html", viewer, items=lists.held(viewer.sh))


@router.get("/go", name="go")
def go(request: Request, to: Text = "") -> Response:
    """The go-to box: a TASK id, case id or submission id opens its page; anything else is
    searched for on the board."""
    viewer = signed_in(request)
    found = lists.locate(viewer.sh, to) if to.strip() else None
    if found is not None:
        return RedirectResponse(f"{PREFIX}/{found}", status_code=303)
    return RedirectResponse(f"{PREFIX}/?{urlencode({'q': to.strip()})}", status_code=303)
