"""FCoP documents: TASK and REPORT markdown with YAML front matter (see reference/fcop.md).

A TASK's document is rendered once, at creation, and its SHA-256 is the receipt's document
digest. The lifecycle position is never read from a document: the store's bucket is the truth,
and the workspace mirror (``surehand.fcop.export``) derives file locations from it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from surehand.model import Report, TaskEvent, TaskFields

# Characters a YAML reader does not accept raw, or reads as line breaks (NEL, LS, PS): JSON
# leaves them unescaped, so they are escaped here.
_NOT_YAML_PRINTABLE = re.compile(
    "[^\x09\x0a\x0d\x20-\x7e\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]|[\u2028\u2029]"
)


def _scalar(value: Any) -> str:
    # JSON scalars, arrays and objects are valid YAML flow nodes: quoting every string this way
    # keeps values like "no", "1.0" or "null" strings, and costs a fraction of a YAML dump
    # (rendering is on write_task's hot path).
    text = json.dumps(value, ensure_ascii=False)
    return _NOT_YAML_PRINTABLE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def _front_matter(front: Mapping[str, Any]) -> str:
    lines = []
    for key, value in front.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            lines.append(f"{key}:")
            lines.extend(f"  - {_scalar(item)}" for item in value)
        else:
            lines.append(f"{key}: {_scalar(value)}")
    return "\n".join(lines) + "\n"


def _document(front: Mapping[str, Any], body: str) -> str:
    return f"---\n{_front_matter(front)}---\n\n{body}\n"


def parse_front_matter(document: str) -> dict[str, Any]:
    """The front matter of a document rendered here (any YAML reader reads it too)."""
    import yaml  # only to read a document back (tests, tools): rendering does not need it

    header = document.split("---\n", 2)[1]
    parsed = yaml.safe_load(header)
    assert isinstance(parsed, dict)
    return parsed


def render_task(
    task_id: str,
    fields: TaskFields,
    *,
    created_at: datetime,
    submission_id: str | None,
    transitions: Sequence[TaskEvent] = (),
) -> str:
    """The TASK file: FCoP front matter (protocol, version, routing, relations) and body."""
    front: dict[str, Any] = {
        "protocol": "fcop",
        "version": 1,
        "type": "TASK",
        "task_id": task_id,
        "sender": fields.sender,
        "recipient": fields.recipient,
        "priority": fields.priority.value,
        "subject": fields.subject,
        "thread_key": fields.thread_key,
        "parent": fields.parent,
        "references": list(fields.references),
        "depends_on": list(fields.depends_on),
        "risk_level": fields.risk_level.value,
        "created_at": created_at.isoformat(),
    }
    if submission_id is not None:
        front["client_submission_id"] = submission_id
    if transitions:
        front["transitions"] = [_transition(event) for event in transitions]
    return _document(front, fields.body)


def _transition(event: TaskEvent) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "at": event.at.isoformat(),
        "from": event.from_bucket.value if event.from_bucket else None,
        "to": event.to_bucket.value if event.to_bucket else None,
        "by": event.by,
        "tool": event.action,
    }
    if event.reason:
        entry["note"] = event.reason
    return entry


def report_filename(report: Report) -> str:
    return f"{report.report_id}-{report.reporter}-to-{report.recipient}.md"


def render_report(report: Report, *, thread_key: str = "") -> str:
    """The REPORT file, with the CodeFlowMu revision fields."""
    front: dict[str, Any] = {
        "protocol": "fcop",
        "version": 1,
        "type": "REPORT",
        "report_id": report.report_id,
        "task_id": report.task_id,
        "source_task_id": report.task_id,
        "sender": report.reporter,
        "reporter": report.reporter,
        "recipient": report.recipient,
        "status": report.status.value,
        "revision": report.revision,
        "rework_round": report.rework_round,
        "content_hash": report.body_hash,
        "thread_key": thread_key,
        "references": [report.task_id],
        "created_at": report.created_at.isoformat(),
    }
    if report.client_submission_id:
        front["client_submission_id"] = report.client_submission_id
    if report.supersedes:
        front["supersedes"] = report.supersedes
    if report.attempt_id:
        front["attempt_id"] = report.attempt_id
    return _document(front, report.body)


def render_recovery(facts: Mapping[str, Any]) -> str:
    """The "Recovery" section of a successor's TASK file, from a briefing's facts
    (:meth:`surehand.agents.briefing.Brief.to_dict`, what ``recovery_brief()`` returns)."""
    lines = [
        "## Recovery",
        "",
        f"This is attempt {facts['attempt']} at {facts['task_id']}. "
        + ("Earlier attempts were interrupted; " if facts["interruptions"] else "")
        + "surehand's records say:",
        "",
    ]
    lines += [_interruption_line(case) for case in facts["interruptions"]]
    lines += ["", "Effects declared by earlier attempts:", ""]
    lines += [_effect_line(effect) for effect in facts["effects"]] or ["- none were declared"]
    children = facts.get("children") or []
    if children:
        lines += ["", "Child TASKs already delegated (delegate again only with the same key):", ""]
        lines += [_child_line(child) for child in children]
    return "\n".join([*lines, "", f"**{facts['instruction']}**", ""])


MAX_CHILD_REPORT = 4000  # characters of a child's REPORT quoted in the Recovery section


def _child_line(child: Mapping[str, Any]) -> str:
    line = f"- {child['task_id']} for {child['recipient']}, key {_code(child['key'])}: "
    line += f"{child['bucket']}{' (held)' if child['held'] else ''}, {_code(child['subject'])}"
    if child.get("depends_on"):
        line += f", after {', '.join(child['depends_on'])}"
    if child.get("report"):
        line += f"; its REPORT: {_code(child['report'][:MAX_CHILD_REPORT])}"
    return line


def _interruption_line(case: Mapping[str, Any]) -> str:
    line = (
        f"- attempt {case['attempt']} ({case['case_id']}): effect fact "
        f"{case['effect_fact'] or 'undecided'}, admission {case['admission'] or 'pending'}"
    )
    review = case.get("review")
    if review:
        line += (
            f"; reviewed by {_code(review.get('by'))}: effect {_code(review.get('effect'))} "
            f"({_code(review.get('note'))})"
        )
    return line


def _effect_line(effect: Mapping[str, Any]) -> str:
    # Names, arguments, keys, receipts and errors come from the agent: each is quoted as JSON
    # in a code span, so nothing in them (a newline, a heading, bold text, backticks) reads
    # as the successor's instructions.
    line = (
        f"- **{effect['status']}**: {_code(effect['name'])} {_code(effect['args'])} "
        f"(operation {effect['operation_id']}, attempt {effect['attempt']}"
    )
    for key in ("idempotency_key", "receipt", "confirmed_by", "error"):
        if effect.get(key):
            line += f", {key.replace('_', ' ')} {_code(effect[key])}"
    if effect.get("declared_within"):  # a journaled call inside the agent's declared effects
        line += ", within operation " + ", ".join(str(i) for i in effect["declared_within"])
    return line + ")"


def _code(value: Any) -> str:
    """``value`` as JSON on one line, in a Markdown code span that nothing inside can close."""
    text = _scalar(value)
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    return f"{fence} {text} {fence}" if longest else f"{fence}{text}{fence}"
