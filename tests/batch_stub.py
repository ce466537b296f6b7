"""A loopback OpenAI-compatible server with the Files and Batches endpoints, beside the chat stub's chat endpoint.

It answers each batch line as the chat stub (tests/llm_stub.py) answers the same request synchronously, so a
batch run and a synchronous run store the same outputs. Listens on 127.0.0.1 only.

    python tests/batch_stub.py --port 0      # prints "listening on http://127.0.0.1:PORT/v1"

Endpoints: POST /v1/files (multipart, purpose=batch), GET /v1/files/ID/content, POST /v1/batches, GET
/v1/batches[/ID], POST /v1/batches/ID/cancel; and POST /v1/chat/completions as the chat stub.

Control, for tests (over HTTP):
- POST /control/batches {"hold": true|false, "fail_every": N, "expire_after": K, "line_delay": S}: batches wait
  in_progress while held; every Nth line of a batch fails (HTTP 500 in the error file); a batch expires after K
  lines (the rest go to the error file as `batch_expired`); each line takes S seconds. Faults of a results file:
  {"repeat_every": N} answers every Nth line twice (the repeat later, with another text), {"unknown_ids": K}
  adds K answers to custom_ids never sent, {"garbage_lines": K} adds K lines that are not JSON,
  {"unusable_first_every": N} answers every Nth line first with a text no parser reads, then again with the usual
  answer. {"no_usage": true}: replies (batch lines and chat calls) carry no `usage`.
- GET /control/batches: {"batches": [...], "lines": requests received in batch files, "files": uploads}.
- POST /control/reset: also forgets batches and files and restores the batch settings.
"""

from __future__ import annotations

import argparse
import email.parser
import itertools
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from llm_stub import (StubHandler, StubServer, chat_completion, last_user_text, load_reply_function,  # noqa: E402
                      structured_reply, stub_reply)

DEFAULT_SETTINGS = {"hold": False, "fail_every": 0, "expire_after": 0, "line_delay": 0.0, "repeat_every": 0,
                    "unknown_ids": 0, "garbage_lines": 0, "unusable_first_every": 0, "no_usage": False}


def default_reply(request: dict, content: str) -> str:
    """As the chat stub answers: in the request's schema when it sends one, else free text."""
    response_format = request.get("response_format")
    if response_format is not None:
        return structured_reply(response_format["json_schema"]["schema"], content)
    return stub_reply(content)


class BatchHandler(StubHandler):
    server: "BatchServer"

    def do_GET(self) -> None:  # noqa: N802
        path = self.path.split("?")[0].rstrip("/")
        server = self.server
        if path == "/control/batches":
            with server.lock:
                self._send(200, {"batches": [dict(b) for b in server.batches.values()], "lines": server.lines,
                                 "files": server.uploads})
        elif path.startswith("/v1/files/") and path.endswith("/content"):
            data = server.files.get(path.split("/")[3])
            if data is None:
                self._send(404, {"error": {"message": "no such file", "type": "invalid_request_error"}})
            else:
                self._send_bytes(data)
        elif path == "/v1/batches":
            with server.lock:
                data = [dict(b) for b in reversed(server.batches.values())]
            self._send(200, {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
                             "last_id": data[-1]["id"] if data else None, "has_more": False})
        elif path.startswith("/v1/batches/"):
            batch = server.batches.get(path.split("/")[3])
            if batch is None:
                self._send(404, {"error": {"message": "no such batch", "type": "invalid_request_error"}})
            else:
                with server.lock:
                    self._send(200, dict(batch))
        else:
            super().do_GET()

    def _send_bytes(self, data: bytes) -> None:
        self.send_response(200)
        self.send_header("content-type", "application/octet-stream")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:  # noqa: N802
        path = self.path.split("?")[0].rstrip("/")
        if path == "/v1/files":
            self._upload()
        elif path == "/v1/batches":
            self._send(200, self.server.create_batch(self._json_body()))
        elif path.startswith("/v1/batches/") and path.endswith("/cancel"):
            batch = self.server.cancel(path.split("/")[3])
            self._send(404 if batch is None else 200,
                       batch or {"error": {"message": "no such batch", "type": "invalid_request_error"}})
        elif path == "/control/batches":
            with self.server.lock:
                self.server.settings.update(self._json_body())
                self.server.released.set() if not self.server.settings["hold"] else self.server.released.clear()
            self._send(200, dict(self.server.settings))
        elif path == "/control/reset":
            self.server.reset_batches()
            super().do_POST()
        else:
            super().do_POST()

    def _upload(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        message = email.parser.BytesParser().parsebytes(
            b"Content-Type: " + self.headers["Content-Type"].encode() + b"\r\n\r\n" + body)
        fields = {part.get_param("name", header="content-disposition"): part.get_payload(decode=True)
                  for part in message.get_payload()}
        if fields.get("purpose") != b"batch" or "file" not in fields:
            self._send(400, {"error": {"message": "expected purpose=batch and a file", "type": "invalid_request_error"}})
            return
        self._send(200, self.server.add_file(fields["file"], "batch"))


class BatchServer(StubServer):
    def __init__(self, port: int = 0, delay: float = 0.0, reply: Any = None) -> None:
        super().__init__(port, delay, reply)
        self.RequestHandlerClass = BatchHandler
        self.reset_batches()

    def omits_usage(self) -> bool:
        with self.lock:
            return bool(self.settings["no_usage"])

    def reset_batches(self) -> None:
        with self.lock:
            self.files: dict[str, bytes] = {}
            self.batches: dict[str, dict] = {}
            self.settings = dict(DEFAULT_SETTINGS)
            self.released = threading.Event()
            self.released.set()
            self.lines = 0
            self.uploads = 0
            self.ids = itertools.count(1)

    def add_file(self, data: bytes, purpose: str) -> dict:
        with self.lock:
            file_id = f"file-{next(self.ids)}"
            self.files[file_id] = data
            self.uploads += purpose == "batch"
        return {"id": file_id, "object": "file", "bytes": len(data), "created_at": int(time.time()),
                "filename": f"{file_id}.jsonl", "purpose": purpose, "status": "processed"}

    def create_batch(self, request: dict) -> dict:
        now = int(time.time())
        with self.lock:
            batch_id = f"batch_{next(self.ids)}"
            data = self.files.get(request.get("input_file_id"), b"")
            lines = [json.loads(line) for line in data.decode().splitlines() if line.strip()]
            self.lines += len(lines)
            batch = {"id": batch_id, "object": "batch", "endpoint": request.get("endpoint"), "errors": None,
                     "input_file_id": request.get("input_file_id"),
                     "completion_window": request.get("completion_window", "24h"), "status": "validating",
                     "output_file_id": None, "error_file_id": None, "created_at": now, "in_progress_at": None,
                     "expires_at": now + 24 * 3600, "finalizing_at": None, "completed_at": None, "failed_at": None,
                     "expired_at": None, "cancelling_at": None, "cancelled_at": None,
                     "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
                     "metadata": request.get("metadata")}
            self.batches[batch_id] = batch
            settings = dict(self.settings)
        threading.Thread(target=self.process, args=(batch, lines, settings), daemon=True).start()
        return dict(batch)

    def cancel(self, batch_id: str) -> dict | None:
        with self.lock:
            batch = self.batches.get(batch_id)
            if batch is None:
                return None
            if batch["status"] in ("validating", "in_progress"):
                batch["status"] = "cancelling"
                batch["cancelling_at"] = int(time.time())
            return dict(batch)

    def process(self, batch: dict, lines: list[dict], settings: dict) -> None:
        with self.lock:
            batch["status"], batch["in_progress_at"] = "in_progress", int(time.time())
        self.released.wait()
        outputs, errors = [], []
        final = "completed"
        for n, line in enumerate(lines, start=1):
            with self.lock:
                if batch["status"] == "cancelling":
                    final = "cancelled"
                    break
            if settings["expire_after"] and n > settings["expire_after"]:
                final = "expired"
                errors += [{"id": f"batch_req_{batch['id']}_{i}", "custom_id": rest["custom_id"], "response": None,
                            "error": {"code": "batch_expired",
                                      "message": "This request could not be executed before the completion window "
                                                 "expired."}}
                           for i, rest in enumerate(lines[n - 1:], start=n)]
                break
            time.sleep(settings["line_delay"])
            request = line["body"]
            if settings["fail_every"] and n % settings["fail_every"] == 0:
                errors.append({"id": f"batch_req_{batch['id']}_{n}", "custom_id": line["custom_id"],
                               "response": {"status_code": 500, "request_id": f"req_{n}",
                                            "body": {"error": {"message": "stub batch line error",
                                                               "type": "server_error"}}}, "error": None})
                counts = "failed"
            else:
                content = last_user_text(request)
                text = self.reply(request, content) if self.reply else default_reply(request, content)
                if settings["unusable_first_every"] and n % settings["unusable_first_every"] == 0:
                    outputs.append({"id": f"batch_req_{batch['id']}_{n}_unusable", "custom_id": line["custom_id"],
                                    "response": {"status_code": 200, "request_id": f"req_{n}_unusable",
                                                 "body": chat_completion(request, content, "no answer here", n)},
                                    "error": None})
                outputs.append({"id": f"batch_req_{batch['id']}_{n}", "custom_id": line["custom_id"],
                                "response": {"status_code": 200, "request_id": f"req_{n}",
                                             "body": chat_completion(request, content, text, n)}, "error": None})
                if settings["repeat_every"] and n % settings["repeat_every"] == 0:
                    repeat = {**outputs[-1], "id": f"batch_req_{batch['id']}_{n}_again"}
                    repeat["response"] = {"status_code": 200, "request_id": f"req_{n}_again",
                                          "body": chat_completion(request, content, "a later, different answer", n)}
                    outputs.append(repeat)
                counts = "completed"
            with self.lock:
                batch["request_counts"][counts] += 1
        if settings["no_usage"]:
            for record in outputs:
                record["response"]["body"].pop("usage", None)
        extra = [json.dumps({"id": f"batch_req_unknown_{i}", "custom_id": f"never-sent-{i}",
                             "response": {"status_code": 200, "request_id": f"req_unknown_{i}",
                                          "body": chat_completion({"model": "stub"}, "", "an answer to nothing", i)},
                             "error": None}) for i in range(settings["unknown_ids"])]
        extra += ["{not json at all" for _ in range(settings["garbage_lines"])]
        with self.lock:
            for name, records in (("output_file_id", outputs), ("error_file_id", errors)):
                lines_out = [json.dumps(r) for r in records] + (extra if name == "output_file_id" else [])
                if lines_out:
                    file_id = f"file-{next(self.ids)}"
                    self.files[file_id] = "".join(line + "\n" for line in lines_out).encode()
                    batch[name] = file_id
            if final == "expired":
                batch["request_counts"]["failed"] += len(lines) - batch["request_counts"]["completed"] \
                    - batch["request_counts"]["failed"]
            batch["status"] = final
            batch[{"completed": "completed_at", "expired": "expired_at", "cancelled": "cancelled_at"}[final]] = \
                int(time.time())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each chat answer")
    parser.add_argument("--reply", metavar="MODULE:FUNCTION", help="reply function (request, last user text)")
    args = parser.parse_args(argv)
    server = BatchServer(args.port, args.delay, load_reply_function(args.reply))
    print(f"listening on {server.base_url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
