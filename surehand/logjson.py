"""Logs as one JSON object per line on stdout (``SUREHAND_LOG_FORMAT=json``), for a shipper.

A container's log stream is read by a shipper (Fluent Bit, Vector, Promtail...) that splits it
into lines; a line per record with named fields needs no parsing rules. Each record carries
``time`` (UTC, ISO 8601), ``level``, ``logger``, ``message``, ``process`` and, inside a Celery
task, ``task_id`` and ``task_name``; a traceback goes in ``exc`` on the same line.

Celery builds its handlers when the worker or beat starts (``after_setup_logger``), uvicorn when
its config is made: :func:`install` hooks the first, :func:`uvicorn_log_config` feeds the second.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

_state = {"format": "text"}
_CELERY_EXTRAS = ("task_id", "task_name")


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
        }
        payload.update(_celery_fields(record))
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str)


def _celery_fields(record: logging.LogRecord) -> dict[str, Any]:
    found = {name: getattr(record, name, None) for name in _CELERY_EXTRAS}
    return {name: value for name, value in found.items() if value not in (None, "???")}


def install(log_format: str) -> None:
    """Use ``log_format`` (``text`` or ``json``) for the loggers this process sets up next."""
    _state["format"] = log_format
    if log_format != "json":
        return
    from celery.signals import after_setup_logger, after_setup_task_logger

    after_setup_logger.connect(_to_json, weak=False)
    after_setup_task_logger.connect(_to_json, weak=False)


def _to_json(logger: logging.Logger | None = None, **_: Any) -> None:
    for handler in logger.handlers if logger is not None else []:
        handler.setFormatter(JsonFormatter())
        if isinstance(handler, logging.StreamHandler) and not isinstance(
            handler, logging.FileHandler
        ):
            handler.setStream(sys.__stdout__)


def uvicorn_log_config() -> dict[str, Any] | None:
    """uvicorn's logging configuration: its own (None) unless JSON was installed."""
    if _state["format"] != "json":
        return None
    from uvicorn.config import LOGGING_CONFIG

    config: dict[str, Any] = json.loads(json.dumps(LOGGING_CONFIG))
    for formatter in config["formatters"].values():
        formatter.clear()
        formatter["()"] = f"{__name__}.JsonFormatter"
    for handler in config["handlers"].values():
        handler["stream"] = "ext://sys.stdout"
    # surehand's own records in the API process (a publish left to the sweep...): without a
    # handler Python's last resort would write them plain to stderr, and drop INFO.
    config["loggers"]["surehand"] = {"handlers": ["default"], "level": "INFO", "propagate": False}
    return config


def configure_process(level: int = logging.INFO) -> None:
    """Log this process's records (not a worker's, beat's or uvicorn's: they configure their
    own) to stdout as JSON under ``json``, else plain to stderr."""
    if _state["format"] != "json":
        logging.basicConfig(level=level)
        return
    handler = logging.StreamHandler(sys.__stdout__)
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=level, handlers=[handler])
