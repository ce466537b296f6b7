"""A loopback OpenAI-compatible stub server: answers chat completions after a fixed delay.

For tests, benchmarks and dry runs of a pipeline without a model. It listens on 127.0.0.1 only. The answer is a
well-formed rewrite of the last "Question: ... / Answer: ..." pair in the prompt (a count plus one, a yes/no
flipped), in the format the rewrite prompts ask for, unless a reply function or a script says otherwise.

    python tests/llm_stub.py --port 0 --delay 0.2    # prints "listening on http://127.0.0.1:PORT/v1"
    python tests/llm_stub.py --reply llm_replies:eval_answers   # a function of (request body, last user text)

Structured output: a request with `response_format` is checked as OpenAI's strict mode checks it (type
`json_schema`, a name, `strict: true`, every object with `additionalProperties: false` and all its properties
required, only the keywords the strict subset takes); a malformed one is refused with HTTP 400, as OpenAI does.
The default reply then follows the schema: a rewrite schema gets the structured rewrite of the prompt's last
"Question/Answer" pair, a MuCR context schema the context reply, any other schema a generic instance of it.

A reply (what a reply function returns, or one entry of a script) is a text (the completion), an HTTP status
to fail with, or a dict scripting the whole exchange:
    {"status": 429, "headers": {"retry-after": "2"}, "body": {...}}   # any status, headers and JSON body
    {"raw": "<html>proxy error</html>"}                                # a body that is not JSON
    {"text": "late", "delay": 1.0}                                     # answer after DELAY seconds (time-outs)
    {"hold": 120.0}                          # the default answer after HOLD seconds (a call kept in flight)

Control, for tests (the tests run it as a process and drive it over HTTP):
- POST /control/script {"replies": [reply, ...]} queues what the next chat requests get, one entry each, in
  order of arrival; once the queue is empty the reply function (or the default rewrite) answers again.
- POST /control/reply {"function": "module:name" | null} swaps the reply function (a module beside this file).
- POST /control/reset empties the queue and the request log and restores the start-up reply function.
- GET /control/requests lists the chat requests received (path, headers, JSON body), oldest first.
- POST /control/hold {"after": N} answers the next N chat requests and holds every later one (unanswered, in
  flight) until POST /control/release; GET /control/held says how many are held now. A test that interrupts a
  run holds it at a known point this way instead of sleeping and hoping the run is still going.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import json
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Union

Reply = Union[str, int, dict]
ReplyFunction = Callable[[dict, str], Reply]


def stub_reply(prompt: str) -> str:
    match = None
    for match in re.finditer(r"Question:[ \t]*(.+)\nAnswer:[ \t]*(.+)", prompt):
        pass
    if match is None:
        return "I cannot rewrite this."
    question, answer = match.group(1).strip(), match.group(2).strip().lower()
    stem = question.rstrip("?").strip()
    if answer in ("yes", "no"):
        flipped = "no" if answer == "yes" else "yes"
        return (f"Step 1. Flipped answer: {flipped}\nStep 2. The opposite holds.\nStep 3. Something changes.\n"
                f"New question: Would it still hold that {stem[0].lower() + stem[1:]} if everything changed?\n"
                f"New answer: {flipped}")
    try:
        count = int(answer)
    except ValueError:
        count = 0
    return (f"Step 1. The answer is {count}.\nStep 2. Add one more.\nStep 3. {count} + 1 = {count + 1}\n"
            f"New question: {stem} if one more were added?\nNew answer: {count + 1}")


def context_reply(prompt: str) -> str:
    """A contextual description of a MuCR caption pair (the `generate context` prompts), else a rewrite."""
    if "Cause caption:" not in prompt:
        return stub_reply(prompt)
    cause = prompt.split("Cause caption:")[-1].split("\n")[0].strip()
    effect = prompt.split("Effect caption:")[-1].split("\n")[0].strip()
    return (f"A tall woman in a red raincoat and black boots, in a city park, grey light.\nCause: {cause}.\n"
            f"Effect: {effect}, tired eyes.\n")


def last_user_text(request: dict) -> str:
    messages = request.get("messages") or []
    content = messages[-1].get("content", "") if messages else ""
    if isinstance(content, list):
        content = "\n".join(p.get("text", "") for p in content if p.get("type") == "text")
    return content


def chat_completion(request: dict, content: str, text: str, n: int) -> dict:
    """The chat completion body answering REQUEST (whose last user text is CONTENT) with TEXT; a token is a word."""
    return {
        "id": f"chatcmpl-stub{n}", "object": "chat.completion", "created": int(time.time()),
        "model": request.get("model", "stub"),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop",
                     "logprobs": None}],
        "usage": {"prompt_tokens": len(content.split()), "completion_tokens": len(text.split()),
                  "total_tokens": len(content.split()) + len(text.split())},
    }


# What OpenAI's strict mode refuses in a schema (cftools sends the portable subset; its grammar keeps the rest).
STRICT_REFUSED = ("maxLength", "minLength", "maximum", "minimum", "exclusiveMaximum", "exclusiveMinimum",
                  "pattern", "$ref", "$defs", "default")


def response_format_error(response_format: Any) -> str | None:
    """Why a response_format would be refused (None: it is a well-formed strict json_schema)."""
    if not isinstance(response_format, dict) or response_format.get("type") != "json_schema":
        return "response_format.type must be 'json_schema'"
    spec = response_format.get("json_schema") or {}
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", str(spec.get("name") or "")):
        return "response_format.json_schema.name must be 1-64 letters, digits, '_' or '-'"
    if spec.get("strict") is not True:
        return "response_format.json_schema.strict must be true"
    return schema_error(spec.get("schema"), "schema")


def schema_error(node: Any, where: str) -> str | None:
    if not isinstance(node, dict):
        return f"{where} is not an object"
    for keyword in STRICT_REFUSED:
        if keyword in node:
            return f"{where}: '{keyword}' is not supported in strict mode"
    if node.get("type") == "object":
        properties = node.get("properties") or {}
        if node.get("additionalProperties") is not False:
            return f"{where}: additionalProperties must be false"
        if sorted(node.get("required") or []) != sorted(properties):
            return f"{where}: every property must be required"
        for name, sub in properties.items():
            found = schema_error(sub, f"{where}.{name}")
            if found:
                return found
    if node.get("type") == "array":
        return schema_error(node.get("items"), f"{where}[]")
    return None


def instance_of(schema: dict, name: str = "value") -> Any:
    """A generic value of SCHEMA (the first enum value, 1, a short text, minItems items)."""
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        return {key: instance_of(sub, key) for key, sub in (schema.get("properties") or {}).items()}
    if kind == "array":
        return [instance_of(schema.get("items") or {}, f"{name} {i + 1}") for i in range(schema.get("minItems") or 1)]
    if kind == "integer" or kind == "number":
        return 1
    if kind == "boolean":
        return True
    return f"stub {name}"


def structured_reply(schema: dict, prompt: str) -> str:
    """The default reply in SCHEMA: a rewrite of the prompt's last question, a context, or a generic instance."""
    properties = schema.get("properties") or {}
    if "new_question" in properties:
        match = None
        for match in re.finditer(r"Question:[ \t]*(.+)\nAnswer:[ \t]*(.+)", prompt):
            pass
        question, answer = (match.group(1).strip(), match.group(2).strip().lower()) if match else ("Is it?", "no")
        stem = question.rstrip("?").strip()
        if "flipped_answer" in properties:
            flipped = "no" if answer == "yes" else "yes"
            return json.dumps({"flipped_answer": flipped, "reasoning": "The opposite holds. Something changes.",
                               "new_question": f"Would it still hold that {stem[0].lower() + stem[1:]} if everything "
                                               f"changed?", "new_answer": flipped})
        count = int(answer) if answer.isdigit() else 0
        return json.dumps({"reasoning": f"The answer is {count}. Add one more. {count} + 1 = {count + 1}",
                           "new_question": f"{stem} if one more were added?", "new_answer": count + 1})
    if set(properties) == {"shared", "cause", "effect"} and "Cause caption:" in prompt:
        cause = prompt.split("Cause caption:")[-1].split("\n")[0].strip()
        effect = prompt.split("Effect caption:")[-1].split("\n")[0].strip()
        return json.dumps({"shared": "A tall woman in a red raincoat and black boots, in a city park, grey light.",
                           "cause": f"{cause}.", "effect": f"{effect}, tired eyes."})
    return json.dumps(instance_of(schema))


class StubHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # as real servers do: no 40 ms delayed-ACK stall between header and body
    server: "StubServer"

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None, raw: str | None = None) -> None:
        data = raw.encode() if raw is not None else json.dumps(body).encode()
        sent = {"content-type": "application/json", **{k.lower(): v for k, v in (headers or {}).items()}}
        sent["content-length"] = str(len(data))
        self.send_response(status)
        for name, value in sent.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _json_body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}")

    def do_GET(self) -> None:  # noqa: N802
        path = self.path.rstrip("/")
        if path.endswith("/stats"):
            self._send(200, {"requests": self.server.requests})
        elif path == "/control/requests":
            with self.server.lock:
                self._send(200, list(self.server.received))
        elif path == "/control/held":
            with self.server.lock:
                self._send(200, {"held": self.server.held})
        else:
            self._send(200, {"object": "list", "data": [{"id": "stub", "object": "model", "owned_by": "cftools"}]})

    def do_POST(self) -> None:  # noqa: N802
        request = self._json_body()
        if self.path.startswith("/control/"):
            self._send(200, self.server.control(self.path.rstrip("/"), request))
            return
        with self.server.lock:
            self.server.requests += 1
            n = self.server.requests
            self.server.received.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                                         "body": request})
            scripted = self.server.script.popleft() if self.server.script else None
        self.server.wait_if_held(n)
        time.sleep(self.server.delay)
        if isinstance(scripted, dict) and "hold" in scripted:
            time.sleep(float(scripted["hold"]))
            scripted = None
        content = last_user_text(request)
        response_format = request.get("response_format")
        if response_format is not None and response_format_error(response_format):
            self._send(400, {"error": {"message": f"Invalid schema for response_format: "
                                                  f"{response_format_error(response_format)}",
                                       "type": "invalid_request_error", "code": None}})
            return
        if scripted is not None:
            reply = scripted
        elif self.server.reply:
            reply = self.server.reply(request, content)
        elif response_format is not None:
            reply = structured_reply(response_format["json_schema"]["schema"], content)
        else:
            reply = stub_reply(content)
        self._answer(reply, request, content, n)

    def _answer(self, reply: Reply, request: dict, content: str, n: int) -> None:
        if isinstance(reply, int):  # an HTTP error status asked for by a test's reply function
            self._send(reply, {"error": {"message": f"stub error {reply}", "type": "server_error", "code": None}})
            return
        if isinstance(reply, dict):
            time.sleep(float(reply.get("delay", 0)))
            if "text" not in reply:
                self._send(int(reply.get("status", 200)), reply.get("body"), reply.get("headers"), reply.get("raw"))
                return
            reply = reply["text"]
        body = chat_completion(request, content, reply, n)
        if self.server.omits_usage():
            body.pop("usage")
        self._send(200, body)


def load_reply_function(spec: str | None) -> ReplyFunction | None:
    """MODULE:NAME, MODULE importable from beside this file (tests/), e.g. llm_replies:eval_answers."""
    if not spec:
        return None
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


class StubServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def __init__(self, port: int = 0, delay: float = 0.2, reply: ReplyFunction | None = None,
                 keep_requests: int = 1000) -> None:
        """REPLY(request, last user text) may replace the default answer (a reply: see the module's doc)."""
        super().__init__(("127.0.0.1", port), StubHandler)
        self.delay = delay
        self.reply = self.start_reply = reply
        self.requests = 0
        self.received: collections.deque = collections.deque(maxlen=keep_requests)  # bounded: benchmarks send many
        self.script: collections.deque = collections.deque()
        self.lock = threading.Lock()
        self.hold_after: int | None = None  # requests numbered above it wait for `released` (/control/hold)
        self.released = threading.Event()
        self.held = 0

    def wait_if_held(self, n: int) -> None:
        with self.lock:
            if self.hold_after is None or n <= self.hold_after or self.released.is_set():
                return
            self.held += 1
        self.released.wait()
        with self.lock:
            self.held -= 1

    def control(self, path: str, request: dict) -> dict:
        with self.lock:
            if path == "/control/script":
                self.script.extend(request.get("replies") or [])
            elif path == "/control/reply":
                self.reply = load_reply_function(request.get("function"))
            elif path == "/control/hold":
                self.hold_after, self.released = self.requests + int(request.get("after", 0)), threading.Event()
            elif path == "/control/release":
                self.released.set()
            elif path == "/control/reset":
                self.script.clear()
                self.received.clear()
                self.reply = self.start_reply
            else:
                return {"error": f"unknown control {path}"}
            return {"queued": len(self.script)}

    def omits_usage(self) -> bool:
        """Whether replies leave out `usage` (as some OpenAI-compatible servers do); the batch stub's setting."""
        return False

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (a time-out a test asked for) leaves a closed socket behind: not an error here.
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def start_in_thread(self) -> "StubServer":
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self


def start_process(delay: float = 0.2, *args: str) -> tuple[subprocess.Popen, str]:
    """This stub as its own process (ARGS: more command-line options); returns it and its base URL (…/v1)."""
    from loopback import start_server

    return start_server(Path(__file__).name, "--port", "0", "--delay", str(delay), *args)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.2, help="seconds before each answer")
    parser.add_argument("--context", action="store_true", help="also answer MuCR context prompts")
    parser.add_argument("--reply", metavar="MODULE:FUNCTION", help="reply function (request, last user text)")
    args = parser.parse_args(argv)
    reply = load_reply_function(args.reply)
    if args.context:
        reply = lambda request, text: (structured_reply(request["response_format"]["json_schema"]["schema"], text)  # noqa: E731
                                       if request.get("response_format") else context_reply(text))
    server = StubServer(args.port, args.delay, reply)
    print(f"listening on {server.base_url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
