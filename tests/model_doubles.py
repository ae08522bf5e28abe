"""Scripted doubles of the model APIs the real agent CLIs speak, for tests that run them.

Claude Code speaks the Anthropic Messages API (``POST /v1/messages``, server-sent events);
Codex speaks the OpenAI Responses API (``POST /v1/responses``, server-sent events). A double
answers each request with the next step of a script: one tool call, or a final message. The
step is chosen from the request alone (how many tool results it already carries), so a
double serves any number of sessions at once, each a conversation of its own, and a successor
attempt starts its script again. A step may be a function of the :class:`Exchange` (the last
tool result, the TASK the agent works on), so a script can use the ``operation_id`` that
``effect_begin`` answered, or act differently for attempt 2. Every request is recorded.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Call:
    """The model calls the tool ``name`` with ``input`` (an MCP tool as ``mcp__server__tool``)."""

    name: str
    input: dict[str, Any]


@dataclass(frozen=True)
class Final:
    """The model ends the conversation with ``text`` (the agent's final message)."""

    text: str


Step = Call | Final


@dataclass(frozen=True)
class Exchange:
    """What a step may depend on: the request, its tool results so far, newest last."""

    body: dict[str, Any]
    results: list[str]

    def last_json(self) -> dict[str, Any]:
        """The newest tool result, parsed as the JSON object a surehand tool answers."""
        text = self.results[-1] if self.results else "{}"
        match = re.search(r"\{.*\}", text, re.S)
        return json.loads(match.group(0)) if match else {}

    def mentions(self, needle: str) -> bool:
        """Whether the request (prompt, tool results) holds ``needle``."""
        return needle in json.dumps(self.body)


StepFor = Step | Callable[[Exchange], Step]


@dataclass(frozen=True)
class Refusal:
    """An HTTP error answer: ``status``, a JSON ``body`` and extra ``headers``."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Script:
    """The steps of a session, in order; past the end, a final message."""

    steps: Sequence[StepFor]
    done: str = "(script finished)"

    def step(self, exchange: Exchange) -> Step:
        index = len(exchange.results)
        if index >= len(self.steps):
            return Final(self.done)
        chosen = self.steps[index]
        return chosen(exchange) if callable(chosen) else chosen


@dataclass
class ModelDouble:
    """A model API double on loopback: ``url`` to point the CLI at, ``requests`` it got."""

    script: Script
    requests: list[dict[str, Any]] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def results_of(self, body: dict[str, Any]) -> list[str]:
        raise NotImplementedError

    def refusal(self, body: dict[str, Any]) -> Refusal | None:
        """An error to answer ``body`` with instead of the script's step (none by default)."""
        return None

    def events(self, step: Step, turn: int) -> Iterator[tuple[str, dict[str, Any]]]:
        raise NotImplementedError

    def answer(self, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """The server-sent events answering one request (recorded)."""
        self.requests.append(body)
        results = self.results_of(body)
        step = self.script.step(Exchange(body, results))
        return list(self.events(step, len(self.requests)))

    def proxied(self) -> bool:
        """Whether every request came through surehand's egress proxy (which sends each on a
        connection of its own, ``Connection: close``; the CLIs keep theirs alive)."""
        return bool(self.requests) and all(r["_connection"] == "close" for r in self.requests)

    def tool_names(self) -> set[str]:
        """Every tool name the CLI offered the model, over all requests."""
        return {name for body in self.requests for name in _tool_names(body)}


def _tool_names(body: dict[str, Any]) -> Iterator[str]:
    for tool in body.get("tools") or []:
        yield str(tool.get("name", ""))
        for inner in tool.get("tools") or []:  # a namespace (Codex's MCP servers)
            yield f"{tool.get('name')}/{inner.get('name')}"


class AnthropicDouble(ModelDouble):
    """Anthropic Messages API with streaming, as Claude Code calls it."""

    def results_of(self, body: dict[str, Any]) -> list[str]:
        found = []
        for message in body.get("messages", []):
            content = message.get("content")
            if message.get("role") != "user" or not isinstance(content, list):
                continue
            found += [_text(block.get("content")) for block in content if _is_result(block)]
        return found

    def events(self, step: Step, turn: int) -> Iterator[tuple[str, dict[str, Any]]]:
        message: dict[str, Any] = {
            "id": f"msg_{turn}",
            "type": "message",
            "role": "assistant",
            "model": "claude-double",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }
        yield "message_start", {"type": "message_start", "message": message}
        if isinstance(step, Call):
            block = {"type": "tool_use", "id": f"toolu_{turn}", "name": step.name, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(step.input)}
            stop = "tool_use"
        else:
            block, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": step.text}
            stop = "end_turn"
        yield (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": block},
        )
        yield "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": 0}
        yield (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 1},
            },
        )
        yield "message_stop", {"type": "message_stop"}


def _is_result(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "tool_result"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(_text(part.get("text", part)) for part in content if isinstance(part, dict))
    return json.dumps(content)


class OpenAIResponsesDouble(ModelDouble):
    """OpenAI Responses API with streaming, as Codex calls it. A :class:`Call` of
    ``mcp__server__tool`` becomes a call of the namespace tool ``mcp__server`` (Codex offers a
    server's tools as one namespace); any other name is a function call as it is."""

    def results_of(self, body: dict[str, Any]) -> list[str]:
        items = body.get("input") or []
        return [
            _text(item.get("output"))
            for item in items
            if isinstance(item, dict) and str(item.get("type", "")).endswith("call_output")
        ]

    def events(self, step: Step, turn: int) -> Iterator[tuple[str, dict[str, Any]]]:
        response = {"id": f"resp_{turn}", "object": "response", "status": "in_progress"}
        yield "response.created", {"type": "response.created", "response": response}
        item = self.item(step, turn)
        yield (
            "response.output_item.added",
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": item,
            },
        )
        yield (
            "response.output_item.done",
            {
                "type": "response.output_item.done",
                "output_index": 0,
                "item": item,
            },
        )
        usage = {
            "input_tokens": 1,
            "input_tokens_details": None,
            "output_tokens": 1,
            "output_tokens_details": None,
            "total_tokens": 2,
        }
        completed = {**response, "status": "completed", "usage": usage}
        yield "response.completed", {"type": "response.completed", "response": completed}

    def item(self, step: Step, turn: int) -> dict[str, Any]:
        if isinstance(step, Final):
            return {
                "type": "message",
                "id": f"msg_{turn}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": step.text, "annotations": []}],
            }
        call = {
            "type": "function_call",
            "id": f"fc_{turn}",
            "call_id": f"call_{turn}",
            "status": "completed",
            "arguments": json.dumps(step.input),
        }
        server, _, tool = step.name.partition("__")[2].partition("__")
        if step.name.startswith("mcp__") and tool:
            return {**call, "namespace": f"mcp__{server}", "name": tool}
        return {**call, "name": step.name}


def _handler(double: ModelDouble) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b"{}"
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {"unparsed": raw.decode(errors="replace")}
            body["_path"] = self.path
            body["_connection"] = self.headers.get("connection", "")  # "close": a proxy's
            refusal = double.refusal(body)
            if refusal is not None:
                self.refuse(refusal)
                return
            events = double.answer(body)
            payload = b"".join(
                f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events
            )
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def refuse(self, refusal: Refusal) -> None:
            payload = json.dumps(refusal.body).encode()
            self.send_response(refusal.status)
            for name, value in {"content-type": "application/json", **refusal.headers}.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:  # model lists and the like: nothing here
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, fmt: str, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def serving(double: ModelDouble, host: str = "127.0.0.1") -> Iterator[ModelDouble]:
    """Serve ``double`` on a free port of ``host`` (a loopback address) while the block runs."""
    server = ThreadingHTTPServer((host, 0), _handler(double))
    server.daemon_threads = True
    double.server = server
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield double
    finally:
        server.shutdown()
        server.server_close()
