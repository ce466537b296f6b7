"""A loopback fault proxy: forwards HTTP to an upstream server (Label Studio, the stub LLM or images server) and, at a
seeded rate, answers a request with a fault instead: a 5xx, a 429 with Retry-After, a reset connection, a delay
past the client's time-out, or a truncated body (the upstream's answer cut in half after its full length was
announced). Faults are injected before the request reaches the upstream, except the truncated body (the upstream
did the work; only the answer is lost).

    python fault_proxy.py --upstream http://127.0.0.1:8080 --rate 0.3 --seed 1 --stall 3
    # prints "listening on http://127.0.0.1:PORT"; GET /__faults__ returns the counts of faults injected
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

FAULTS = ("500", "503", "429", "reset", "stall", "truncate")
HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "content-encoding",
               "proxy-connection", "upgrade", "te", "trailer"}


class ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: "FaultProxy"

    def log_message(self, *args: Any) -> None:
        pass

    def _reply(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _reset(self) -> None:
        # SO_LINGER 0: close sends RST, as a crashed server or a dropped connection does
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        self.close_connection = True

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if self.path == "/__faults__":
            self._reply(200, json.dumps(dict(self.server.injected)).encode(), {"Content-Type": "application/json"})
            return
        fault = self.server.choose_fault()
        if fault in ("500", "503"):
            self._reply(int(fault), b'{"error": {"message": "injected fault"}}', {"Content-Type": "application/json"})
            return
        if fault == "429":
            self._reply(429, b'{"error": {"message": "slow down"}}',
                        {"Content-Type": "application/json", "Retry-After": "1"})
            return
        if fault == "reset":
            self._reset()
            return
        if fault == "stall":
            time.sleep(self.server.stall_s)
            self._reset()
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
        upstream = self.server.client.request(self.command, self.path, content=body, headers=headers)
        out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP_HEADERS}
        if fault == "truncate" and len(upstream.content) > 1:
            self.send_response(upstream.status_code)
            for name, value in out_headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(upstream.content)))
            self.end_headers()
            self.wfile.write(upstream.content[:len(upstream.content) // 2])
            self.wfile.flush()
            self._reset()
            return
        self._reply(upstream.status_code, upstream.content, out_headers)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle  # noqa: N815


class FaultProxy(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def __init__(self, upstream: str, rate: float, seed: int, stall_s: float = 3.0, port: int = 0,
                 faults: tuple[str, ...] = FAULTS) -> None:
        super().__init__(("127.0.0.1", port), ProxyHandler)
        self.client = httpx.Client(base_url=upstream.rstrip("/"), timeout=120)
        self.rate, self.stall_s, self.faults = rate, stall_s, faults
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.injected: Counter = Counter()

    def choose_fault(self) -> str | None:
        with self.lock:
            if self.rng.random() >= self.rate:
                return None
            fault = self.rng.choice(self.faults)
            self.injected[fault] += 1
            return fault

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--rate", type=float, default=0.2, help="share of requests answered with a fault")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stall", type=float, default=3.0, help="seconds a stalled request hangs before a reset")
    parser.add_argument("--faults", default=",".join(FAULTS), help=f"which faults ({','.join(FAULTS)})")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    proxy = FaultProxy(args.upstream, args.rate, args.seed, args.stall, args.port,
                       tuple(f for f in args.faults.split(",") if f))
    print(f"listening on {proxy.url}", flush=True)
    try:
        proxy.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
