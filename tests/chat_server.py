"""A small real server speaking the chat-completions protocol (`POST /v1/chat/completions`) on
loopback: it answers from a script, in order, and records every request it receives."""

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

COMPLETIONS_PATH = "/v1/chat/completions"


@dataclass
class Answer:
    """One scripted answer: a status, headers, and a body (a dict is sent as JSON)."""

    status: int = 200
    body: dict[str, Any] | str = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0
    """Seconds to wait before answering."""


def completion(content: str, model: str = "test-model") -> Answer:
    """A successful chat completion whose first choice says `content`."""
    return Answer(
        body={
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17},
        }
    )


def api_error(status: int, message: str, **headers: str) -> Answer:
    return Answer(status, {"error": {"message": message, "type": "test"}}, headers)


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    """By lower-case name."""
    body: dict[str, Any]
    at: float
    """time.monotonic() when it arrived."""


@dataclass
class ChatServer:
    script: list[Answer]
    by_model: dict[str, list[Answer]] = field(default_factory=dict)
    """Scripts of their own for some models (agents declaring different models get their own
    answers whatever order they ask in)."""
    received: list[Received] = field(default_factory=list)
    url: str = ""
    """The API root to declare as `base_url`."""

    def next_answer(self, model: str) -> Answer:
        """The model's or the script's next answer; past its end, a 500 saying so."""
        script = self.by_model.get(model, self.script)
        return script.pop(0) if script else api_error(500, "script exhausted")

    def prompts(self, model: str) -> list[str]:
        """The user messages the model was sent, in order."""
        return [
            message["content"]
            for request in self.received
            if request.body.get("model") == model
            for message in request.body["messages"]
            if message["role"] == "user"
        ]


def _handler(chat: ChatServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            received = Received(
                self.path,
                {name.lower(): value for name, value in self.headers.items()},
                json.loads(body or b"{}"),
                time.monotonic(),
            )
            chat.received.append(received)
            if self.path == COMPLETIONS_PATH:
                answer = chat.next_answer(str(received.body.get("model")))
            else:
                answer = Answer(404)
            time.sleep(answer.delay)
            payload = answer.body if isinstance(answer.body, str) else json.dumps(answer.body)
            data = payload.encode()
            self.send_response(answer.status)
            for name, value in {"Content-Type": "application/json", **answer.headers}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

    return Handler


@contextmanager
def chat_server(
    *script: Answer, by_model: dict[str, list[Answer]] | None = None
) -> Iterator[ChatServer]:
    chat = ChatServer(list(script), dict(by_model or {}))
    http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(chat))
    chat.url = f"http://127.0.0.1:{http.server_address[1]}/v1"
    threading.Thread(target=http.serve_forever, daemon=True).start()
    try:
        yield chat
    finally:
        http.shutdown()
        http.server_close()


def tool_calls(*calls: tuple[str, dict[str, Any]], model: str = "test-model") -> Answer:
    """A chat completion in which the model calls tools (name, arguments) instead of answering."""
    answer = completion("", model)
    assert isinstance(answer.body, dict)
    answer.body["choices"][0]["message"] = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call-{index}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            for index, (name, arguments) in enumerate(calls)
        ],
    }
    answer.body["choices"][0]["finish_reason"] = "tool_calls"
    return answer
