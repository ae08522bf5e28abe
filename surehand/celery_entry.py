"""The Celery app as a module attribute, for Celery's own command line and Flower.

``celery -A surehand.celery_entry flower`` (what ``surehand flower`` runs) and
``celery -A surehand.celery_entry inspect ping`` load ``app`` from here. It is configured from
``SUREHAND_*`` like every other process, and has surehand's tasks registered, so Flower knows
``surehand.run_session``, ``surehand.reconcile`` and ``surehand.hold_notice`` by name.
"""

from __future__ import annotations

from surehand.facade import Surehand

app = Surehand.from_env().celery
