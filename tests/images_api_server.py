"""A loopback HTTP server that speaks the OpenAI Images API (POST /v1/images/generations, b64_json replies; POST
/v1/images/edits, multipart with the original image, logged with `"edit": true` and the image's size in bytes).

Run as a real process by the tests (`python tests/images_api_server.py` prints `listening on URL` once listening).
Each image is a small PNG drawn from a hash of the prompt and its index, so replies are reproducible.

Control (for tests only):
- POST /control/script {"replies": ["429", "500", "bad_base64", "short", "slow", "no_data", "ok", ...]} queues what the
  next generation requests get, one entry per request ("ok" once the queue is empty). "429" carries
  Retry-After (seconds, from "retry_after", default 0); "slow" sleeps "slow_s" seconds before answering;
  "degenerate" answers image 0 at 1x1 px, image 1 at 293x37 px and image 2 in one colour (the rest as asked), what
  a broken Images API backend was seen to return.
- GET /control/requests lists the generation requests received: their JSON bodies and whether an
  Authorization header was present. The header's value is never stored or echoed, nor is any request
  header echoed in an error body.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import PIL.Image
import PIL.ImageDraw

STATE_LOCK = threading.Lock()
STATE: dict = {"replies": [], "retry_after": 0, "slow_s": 5.0, "requests": []}


def draw_png(prompt: str, index: int, width: int, height: int) -> bytes:
    digest = hashlib.sha256(f"{prompt}\n{index}".encode()).digest()
    image = PIL.Image.new("RGB", (width, height), tuple(digest[0:3]))
    draw = PIL.ImageDraw.Draw(image)
    for i in range(4):  # four boxes placed by the hash: distinct pictures per prompt and index
        b = digest[4 + 6 * i: 10 + 6 * i]
        x0, y0 = b[0] * width // 256, b[1] * height // 256
        draw.rectangle([x0, y0, x0 + width // 3, y0 + height // 3], fill=tuple(b[2:5]))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - quiet: tests read replies, not logs
        pass

    def _send(self, status: int, body: dict, headers: dict | None = None) -> None:
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def _body(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length) or b"{}")

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/control/requests":
            with STATE_LOCK:
                self._send(200, {"requests": list(STATE["requests"])})
        else:
            self._send(404, {"error": {"message": "not found", "type": "invalid_request_error"}})

    def _multipart(self) -> tuple[dict, int]:
        """The form fields of a multipart edit request, and the size of its image part."""
        from email.parser import BytesParser
        from email.policy import default

        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        message = BytesParser(policy=default).parsebytes(
            f"Content-Type: {self.headers.get('Content-Type')}\r\n\r\n".encode() + raw)
        fields, image_bytes = {}, 0
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            if part.get_filename():
                image_bytes += len(part.get_payload(decode=True) or b"")
            else:
                fields[name] = part.get_content().strip()
        return fields, image_bytes

    def do_POST(self) -> None:  # noqa: N802
        if self.path.rstrip("/") == "/v1/images/edits":
            body, image_bytes = self._multipart()
            self._answer_images(body, {"edit": True, "image_bytes": image_bytes})
            return
        body = self._body()
        if self.path == "/control/script":
            with STATE_LOCK:
                STATE["replies"] = list(body.get("replies", []))
                STATE["retry_after"] = body.get("retry_after", 0)
                STATE["slow_s"] = body.get("slow_s", 5.0)
                STATE["requests"] = []
            self._send(200, {"ok": True})
            return
        if self.path.rstrip("/") != "/v1/images/generations":
            self._send(404, {"error": {"message": "not found", "type": "invalid_request_error"}})
            return
        self._answer_images(body, {})

    def _answer_images(self, body: dict, logged: dict) -> None:
        with STATE_LOCK:
            STATE["requests"].append({"body": body, "authorized": bool(self.headers.get("Authorization")), **logged})
            reply = STATE["replies"].pop(0) if STATE["replies"] else "ok"
            retry_after, slow_s = STATE["retry_after"], STATE["slow_s"]
        if reply == "429":
            self._send(429, {"error": {"message": "rate limit reached", "type": "rate_limit_error"}},
                       {"Retry-After": str(retry_after)})
        elif reply == "500":
            self._send(500, {"error": {"message": "server error", "type": "server_error"}})
        elif reply == "no_data":  # a 200 whose body has no data list
            self._send(200, {"created": int(time.time())})
        elif reply == "400":
            self._send(400, {"error": {"message": "bad request", "type": "invalid_request_error"}})
        else:
            if reply == "slow":
                time.sleep(slow_s)
            self._send(200, self._images(body, reply))

    def _images(self, body: dict, reply: str) -> dict:
        n = int(body.get("n") or 1)
        width, height = (int(v) for v in str(body.get("size") or "64x64").split("x"))
        if reply == "short":
            n = max(0, n - 1)
        data = []
        for index in range(n):
            b64 = base64.b64encode(self._png(str(body.get("prompt", "")), index, width, height, reply)).decode()
            if reply == "bad_base64" and index == 0:
                b64 = "***not base64***"
            data.append({"b64_json": b64})
        return {"created": int(time.time()), "data": data}

    @staticmethod
    def _png(prompt: str, index: int, width: int, height: int, reply: str) -> bytes:
        if reply == "degenerate" and index == 0:
            return draw_png(prompt, index, 1, 1)
        if reply == "degenerate" and index == 1:
            return draw_png(prompt, index, 293, 37)
        if reply == "degenerate" and index == 2:
            out = io.BytesIO()
            PIL.Image.new("RGB", (width, height), (128, 128, 128)).save(out, format="PNG")
            return out.getvalue()
        return draw_png(prompt, index, width, height)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
