"""The review console: held TASKs, their evidence and the approver's decision in a web page.

Served under ``/ui/`` by ``surehand api`` and ``surehand up`` (mounted by
:func:`surehand.api.app.create_app`), on the same service layer as every door: pages read
through a :class:`~surehand.facade.Surehand` handle acting as the signed-in principal, and a
review is :meth:`Surehand.review <surehand.facade.Surehand.review>`. Nothing here speaks SQL.
"""

from __future__ import annotations

from surehand.ui.app import create_console

__all__ = ["create_console"]
