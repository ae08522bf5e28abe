"""SUREHAND_LOG_FORMAT=json: every log record is one JSON line on stdout that a log shipper
reads without parsing rules (issue 23), for Celery's handlers and for uvicorn's."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator

import pytest
from celery.signals import after_setup_logger

from surehand import logjson
from surehand.config import Settings


@pytest.fixture
def text_afterwards() -> Iterator[None]:
    yield
    logjson.install("text")
    after_setup_logger.disconnect(logjson._to_json)


def record(message: str, **extra: object) -> logging.LogRecord:
    made = logging.LogRecord("surehand.x", logging.WARNING, __file__, 1, message, (), None)
    made.__dict__.update(extra)
    return made


def test_a_record_is_one_json_line_with_named_fields() -> None:
    line = logjson.JsonFormatter().format(record("lease lost\nfor T-1", task_id="abc"))
    assert "\n" not in line
    fields = json.loads(line)
    assert fields["message"] == "lease lost\nfor T-1"
    assert (fields["level"], fields["logger"], fields["task_id"]) == (
        "WARNING",
        "surehand.x",
        "abc",
    )
    assert fields["time"].endswith("+00:00")


def test_a_traceback_stays_on_the_records_line() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        failed = record("failed")
        failed.exc_info = sys.exc_info()
    line = logjson.JsonFormatter().format(failed)
    assert "RuntimeError: boom" in json.loads(line)["exc"]


def test_celerys_handlers_write_json_to_stdout_once_json_is_installed(
    text_afterwards: None, capsys: pytest.CaptureFixture[str]
) -> None:
    logjson.install("json")
    logger = logging.Logger("celery-like")
    logger.addHandler(logging.StreamHandler(io.StringIO()))
    after_setup_logger.send(sender=None, logger=logger, loglevel=logging.INFO)
    handler = logger.handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    assert isinstance(handler.formatter, logjson.JsonFormatter)
    assert handler.stream is sys.__stdout__


def test_uvicorn_keeps_its_own_format_unless_json_is_asked_for(text_afterwards: None) -> None:
    logjson.install("text")
    assert logjson.uvicorn_log_config() is None
    logjson.install("json")
    config = logjson.uvicorn_log_config()
    assert config is not None
    assert {f["()"] for f in config["formatters"].values()} == {"surehand.logjson.JsonFormatter"}
    assert {h["stream"] for h in config["handlers"].values()} == {"ext://sys.stdout"}


def test_the_format_is_a_setting_that_refuses_anything_else() -> None:
    assert Settings(log_format="json").log_format == "json"
    with pytest.raises(ValueError, match="log_format"):
        Settings(log_format="xml")


def test_surehands_own_records_in_the_api_go_to_the_json_handler(text_afterwards: None) -> None:
    # Without a handler, Python's last resort wrote them plain to stderr and dropped INFO.
    logjson.install("json")
    config = logjson.uvicorn_log_config()
    assert config is not None
    surehand = config["loggers"]["surehand"]
    assert surehand == {"handlers": ["default"], "level": "INFO", "propagate": False}
    assert config["handlers"]["default"]["stream"] == "ext://sys.stdout"
