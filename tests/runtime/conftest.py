"""Tiny random Qwen3 models, built once per session in a temporary folder, and the backends on them."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from frognano.runtime.tiny import build_tiny

# The harness's own tools: what constrained decoding must produce in real episodes.
from frognano.repair.harness import TOOLS  # noqa: E402

MESSAGES = [
    {"role": "system", "content": "You fix failing tests."},
    {"role": "user", "content": "FAILED tests/test_stats.py::test_mean - assert 1.5 == 2"},
]


def parse_call(text: str, tools=TOOLS):
    """``(name, arguments)`` when ``text`` is exactly one well-formed call to one of ``tools``, else None."""
    head, tail = "<tool_call>\n", "\n</tool_call>"
    if not (text.startswith(head) and text.endswith(tail)):
        return None
    try:
        call = json.loads(text[len(head):-len(tail)])
    except ValueError:
        return None
    if not isinstance(call, dict) or set(call) != {"name", "arguments"} or not isinstance(call["arguments"], dict):
        return None
    schemas = {t["function"]["name"]: t["function"].get("parameters", {}) for t in tools}
    if call["name"] not in schemas:
        return None
    params = schemas[call["name"]]
    props = params.get("properties", {})
    if not set(params.get("required", [])) <= set(call["arguments"]) or not set(call["arguments"]) <= set(props):
        return None
    types = {"string": str, "integer": int, "array": list, "object": dict, "boolean": bool}
    for key, value in call["arguments"].items():
        want = types[props[key]["type"]]
        if not isinstance(value, want) or isinstance(value, bool):
            return None
    return call["name"], call["arguments"]


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """``tiny_dir("torch")`` / ``tiny_dir("mlx")``: the session's tiny model folders."""
    for module in ("numpy", "safetensors", "tokenizers"):
        pytest.importorskip(module, reason=f"{module} comes with frognano[mlx] / frognano[torch]")
    root = tmp_path_factory.mktemp("tiny-models")
    built = {}

    def get(fmt: str):
        if fmt not in built:
            built[fmt] = build_tiny(root / fmt, fmt, seed=0)
        return built[fmt]

    return get


@pytest.fixture(scope="session")
def tiny_torch(tiny_dir):
    return tiny_dir("torch")


@pytest.fixture(scope="session")
def tiny_mlx(tiny_dir):
    return tiny_dir("mlx")


@pytest.fixture(scope="session")
def mlx_model(tiny_mlx):
    pytest.importorskip("mlx_lm")
    from frognano.runtime.load import load_model

    model = load_model(f"mlx:{tiny_mlx}")
    yield model
    model.close()


@pytest.fixture(scope="session")
def torch_model(tiny_torch):
    pytest.importorskip("transformers")
    from frognano.runtime.load import load_model

    model = load_model(f"torch:{tiny_torch}", device="cpu")
    yield model
    model.close()


@pytest.fixture(params=["mlx", "torch"])
def model(request):
    """Each in-process backend on the tiny model, its prompt cache emptied."""
    m = request.getfixturevalue(f"{request.param}_model")
    m.reset_cache()
    return m


@pytest.fixture
def constrained(model):
    """``model``, where xgrammar (needed for constrained tool calls) is installed."""
    pytest.importorskip("xgrammar")
    return model


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def mlx_server(tmp_path_factory, tiny_mlx) -> Iterator[tuple[str, str]]:
    """``(base_url, model id)`` of a real mlx_lm.server serving a tiny random model; stopped afterwards."""
    pytest.importorskip("mlx_lm")
    root = tmp_path_factory.mktemp("mlx-server")
    model = Path(tiny_mlx).resolve()
    hf_home = root / "hf"
    (hf_home / "hub").mkdir(parents=True)  # an empty cache: /v1/models lists only our model
    port = free_port()
    env = dict(os.environ, HF_HOME=str(hf_home), HF_HUB_CACHE=str(hf_home / "hub"), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1")
    url = f"http://127.0.0.1:{port}/v1"
    args = [sys.executable, "-m", "mlx_lm", "server", "--model", str(model), "--host", "127.0.0.1",
            "--port", str(port), "--max-tokens", "64"]
    with serving("mlx_lm.server", args, url, root / "server.log", seconds=60, env=env):
        yield url, str(model)


@contextlib.contextmanager
def serving(name: str, args: list[str], url: str, log_path: Path, *, seconds: float,
            env: dict[str, str] | None = None) -> Iterator[subprocess.Popen]:
    """A server process started with ``args``, once ``{url}/models`` answers 200; stopped after."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + seconds
        while True:
            if proc.poll() is not None:
                pytest.fail(f"{name} exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"{name} did not answer {url}/models within {seconds:g} s:\n"
                            f"{log_path.read_text()[-3000:]}")
            time.sleep(0.2)
        yield proc
    finally:
        stop(proc)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
