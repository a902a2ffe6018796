"""Tiny random Qwen3 models, built once per session in a temporary folder, and the backends on them."""

from __future__ import annotations

import json

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
    from frognano.runtime.base import load_model

    model = load_model(f"mlx:{tiny_mlx}")
    yield model
    model.close()


@pytest.fixture(scope="session")
def torch_model(tiny_torch):
    pytest.importorskip("transformers")
    from frognano.runtime.base import load_model

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
