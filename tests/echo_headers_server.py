"""A loopback HTTP server, run as its own process, that refuses every request (HTTP 400) and echoes
its headers in the body, as a misconfigured proxy or a debugging server would.

The body is JSON {"error": {"message": ECHO}}, ECHO being PAD dots, then the Authorization header, then the other headers: a request to
/pad/NNNN/... puts the token about NNNN characters into the body, so a test can move it across the point
where an error message is cut. Prints its port on the first line of stdout.
"""

from __future__ import annotations

import json
import re
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PAD = re.compile(r"^/pad/(\d+)(/|$)")


class EchoHeaders(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        if length:
            self.rfile.read(length)
        match = PAD.match(self.path)
        pad = int(match.group(1)) if match else 0
        headers = sorted(self.headers.items(), key=lambda kv: kv[0].lower() != "authorization")
        echo = "." * pad + "".join(f"{name}: {value}\n" for name, value in headers)
        # The OpenAI error shape: the OpenAI SDK puts only error.message into its exception's text.
        body = json.dumps({"error": {"message": echo}}).encode("utf-8")
        self.send_response(400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = answer

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet: the test reads stdout
        pass


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), EchoHeaders)
    print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
