"""`hf:` models load from local files only unless downloads are allowed, and no loader sets HF_HUB_OFFLINE for
the whole process. Run in a child process so the hub's settings are read fresh from its environment."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


class CountingHub(http.server.BaseHTTPRequestHandler):
    """A loopback stand-in for the hub: answers 404 to everything and counts the requests."""

    requests: list[str] = []

    def do_GET(self) -> None:  # noqa: N802
        CountingHub.requests.append(self.path)
        self.send_response(404)
        self.end_headers()

    do_HEAD = do_GET

    def log_message(self, *args) -> None:  # noqa: ANN002
        pass


def run_child(code: str, **env: str) -> subprocess.CompletedProcess:
    child_env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    child_env.update(PYTHONPATH=str(ROOT), **env)
    return subprocess.run([sys.executable, "-c", code], env=child_env, capture_output=True, text=True, timeout=300)


def test_an_uncached_id_is_not_downloaded_unless_allowed(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), CountingHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    code = ("from cftools.evaluate.vlm import HFVisionModel\n"
            "from cftools.errors import CftoolsError\n"
            "import os, sys\n"
            "try:\n"
            "    HFVisionModel.load('someone/not-cached-vlm', device='cpu', allow_downloads=len(sys.argv) > 1)\n"
            "except CftoolsError as exc:\n"
            "    print(exc)\n"
            "print('HF_HUB_OFFLINE' in os.environ)\n")
    try:
        CountingHub.requests.clear()
        offline = run_child(code, HF_ENDPOINT=endpoint, HF_HOME=str(tmp_path / "hf"))
        assert "downloads are off" in offline.stdout, offline.stdout + offline.stderr
        assert offline.stdout.strip().endswith("False")
        assert not [path for path in CountingHub.requests if "not-cached-vlm" in path]

        allowed = run_child(code.replace("len(sys.argv) > 1", "True"), HF_ENDPOINT=endpoint,
                            HF_HOME=str(tmp_path / "hf"))
        assert "cannot load hf:someone/not-cached-vlm" in allowed.stdout, allowed.stdout + allowed.stderr
        assert [path for path in CountingHub.requests if "not-cached-vlm" in path]  # it asked the stand-in hub
    finally:
        server.shutdown()


def test_loading_a_local_model_leaves_hf_hub_offline_unset(tiny_llava_dir):
    code = ("from cftools.evaluate.vlm import HFVisionModel\nimport os\n"
            f"HFVisionModel.load({str(tiny_llava_dir)!r}, device='cpu', dtype='fp32')\n"
            "print('HF_HUB_OFFLINE' in os.environ)\n")
    child = run_child(code)
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "False"
