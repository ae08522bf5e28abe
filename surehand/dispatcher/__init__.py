"""The service layer every front door shares: write_task, write_report, lifecycle moves,
sessions, the reconciler and recovery admission."""

from __future__ import annotations
