"""A loopback OpenAI-compatible stub server: answers chat completions after a fixed delay.

For tests, benchmarks and dry runs of a pipeline without a model. It listens on 127.0.0.1 only. The answer is a
well-formed rewrite of the last "Question: ... / Answer: ..." pair in the prompt (a count plus one, a yes/no
flipped), in the format the rewrite prompts ask for.

    python -m llm_stub --port 0 --delay 0.2     # prints "listening on http://127.0.0.1:PORT/v1"
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable



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


class StubHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # as real servers do: no 40 ms delayed-ACK stall between header and body
    server: "StubServer"

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        if self.path.rstrip("/").endswith("/stats"):
            self._send(200, {"requests": self.server.requests})
            return
        self._send(200, {"object": "list", "data": [{"id": "stub", "object": "model", "owned_by": "cftools"}]})

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        request = json.loads(self.rfile.read(length) or b"{}")
        with self.server.lock:
            self.server.requests += 1
            n = self.server.requests
        time.sleep(self.server.delay)
        messages = request.get("messages") or []
        content = messages[-1].get("content", "") if messages else ""
        if isinstance(content, list):
            content = "\n".join(p.get("text", "") for p in content if p.get("type") == "text")
        reply = self.server.reply(request, content) if self.server.reply else stub_reply(content)
        if isinstance(reply, int):  # an HTTP error status asked for by a test's reply function
            self._send(reply, {"error": {"message": f"stub error {reply}", "type": "server_error", "code": None}})
            return
        text = reply
        self._send(200, {
            "id": f"chatcmpl-stub{n}", "object": "chat.completion", "created": int(time.time()),
            "model": request.get("model", "stub"),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop",
                         "logprobs": None}],
            "usage": {"prompt_tokens": len(content.split()), "completion_tokens": len(text.split()),
                      "total_tokens": len(content.split()) + len(text.split())},
        })


class StubServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def __init__(self, port: int = 0, delay: float = 0.2,
                 reply: Callable[[dict[str, Any], str], str | int] | None = None) -> None:
        """REPLY(request, last user text) may replace the default answer: a text, or an HTTP status to fail with."""
        super().__init__(("127.0.0.1", port), StubHandler)
        self.delay = delay
        self.reply = reply
        self.requests = 0
        self.lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def start_in_thread(self) -> "StubServer":
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.2, help="seconds before each answer")
    parser.add_argument("--context", action="store_true", help="also answer MuCR context prompts")
    args = parser.parse_args(argv)
    server = StubServer(args.port, args.delay,
                        reply=(lambda request, text: context_reply(text)) if args.context else None)
    print(f"listening on {server.base_url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
