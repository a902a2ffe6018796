"""``check_spec``: a model SPEC that cannot work is named in one line, before any test runs."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from frognano.errors import FrogNanoError
from frognano.runtime.preflight import check_spec


class _Models(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = json.dumps({"data": [{"id": "tiny"}]}).encode()
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Models)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def _message(spec: str) -> str:
    with pytest.raises(FrogNanoError) as exc:
        check_spec(spec)
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_local_folders(tmp_path):
    assert "no such model folder" in _message(f"torch:{tmp_path / 'missing'}")
    assert "no config.json" in _message(f"mlx:{tmp_path}")
    (tmp_path / "config.json").write_text("{}")
    check_spec(f"torch:{tmp_path}")  # only looked at: nothing is loaded


def test_replay_file(tmp_path):
    assert "no such file" in _message(f"replay:{tmp_path / 'episode.json'}")
    (tmp_path / "episode.json").write_text("[]")
    check_spec(f"replay:{tmp_path / 'episode.json'}")


def test_endpoints(server):
    check_spec(f"openai:tiny@{server}")
    assert "not served by" in _message(f"openai:other@{server}")
    assert "cannot reach http://127.0.0.1:9/v1" in _message("openai:tiny@http://127.0.0.1:9/v1")
    assert "expected mlx:PATH_OR_ID" in _message("nonsense")
