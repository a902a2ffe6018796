"""The OpenAI-compatible backend against a real llama.cpp server: llama-cpp-python's
``python -m llama_cpp.server`` on 127.0.0.1 serving the real SmolLM2-135M-Instruct GGUF.

What such a server does that the stubs of ``test_http.py`` only script: it names the model by
its path unless given ``--model_alias``; it refuses a prompt longer than ``--n_ctx`` with an
HTTP 400, or, streaming, with an empty 200 stream; it streams no token counts.  A small
``--n_ctx`` (512) makes the overflow come within a few turns, and the end-to-end test shows a
``frognano fix`` whose episodes overflow end as the search left it, not as an error.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from frognano.repair.harness import TOOLS, ToolError, parse_tool_call
from frognano.runtime.base import ContextOverflow, ModelError, Sampling
from frognano.runtime.http import OpenAIModel
from frognano.runtime.preflight import check_spec

from ..conftest import CHILD_TIMEOUT, write_project
from .conftest import free_port, serving, stop

pytestmark = [pytest.mark.real_model, pytest.mark.slow]

# The exact command; llama-cpp-python compiles llama.cpp from its sdist (cmake and a C compiler:
# 4 min wall on 2 loaded cores here, 37 min at nice 10 on a busier day); pip caches the wheel.
INSTALL = "pip install 'llama-cpp-python[server]==0.3.36'"
N_CTX = 512
ALIAS = "smollm2"
STEM = "SmolLM2-135M-Instruct.Q4_1"
SHORT = [{"role": "user", "content": "Write a Python function that adds two numbers."}]
LONG = [{"role": "user", "content": "word " * 700}]  # 731 tokens with SmolLM2's template: over 512


def _server_missing() -> str | None:
    for module in ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings"):
        if importlib.util.find_spec(module) is None:
            return f"llama-cpp-python's server is not installed (no {module}): {INSTALL}"
    return None


@contextlib.contextmanager
def llama_server(gguf: Path, log_path: Path, alias: str | None = None) -> Iterator[tuple[str, subprocess.Popen]]:
    """``(base_url, process)`` of ``python -m llama_cpp.server`` on a free 127.0.0.1 port, one
    thread, a ``N_CTX`` window; stopped when the block ends."""
    missing = _server_missing()
    if missing:
        pytest.skip(missing)
    port = free_port()
    args = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
            "--port", str(port), "--n_ctx", str(N_CTX), "--n_threads", "1"]
    if alias:
        args += ["--model_alias", alias]
    url = f"http://127.0.0.1:{port}/v1"
    with serving("llama_cpp.server", args, url, log_path, seconds=120) as proc:
        yield url, proc


@pytest.fixture(scope="session")
def llama_url(smollm2_gguf, tmp_path_factory) -> Iterator[str]:
    """The base URL of the session's llama.cpp server: SmolLM2 as ``smollm2``, a 512-token window."""
    with llama_server(smollm2_gguf, tmp_path_factory.mktemp("llama-cpp") / "server.log", ALIAS) as (url, _):
        yield url


def test_a_model_listed_by_path_is_matched_by_file_name_then_the_server_dies(smollm2_gguf, tmp_path):
    with llama_server(smollm2_gguf, tmp_path / "server.log") as (url, proc):  # no --model_alias
        listed = OpenAIModel(STEM, url).served_models()
        assert listed == [str(smollm2_gguf)]  # llama-cpp-python names the model by its path
        for name in (STEM, f"{STEM}.gguf"):
            model = OpenAIModel(name, url)
            gen = model.generate(SHORT, sampling=Sampling(max_tokens=4, seed=0))
            assert gen.text and gen.completion_tokens >= 1
            assert model._served_id == str(smollm2_gguf)  # the request named the listed id
        with pytest.raises(ModelError) as err:
            check_spec(f"openai:{ALIAS}@{url}")  # what `frognano fix --model` says before any test runs
        assert str(err.value) == (
            f"model {ALIAS} is not served by {url} (it serves: {smollm2_gguf}); name it by its file name, or start "
            f"llama-cpp-python's server with --model_alias {ALIAS} (llama-server: --alias {ALIAS})")
        stop(proc)
        # dead: a plain model error, quick, not an overflow (the model is broken, not this episode)
        start = time.monotonic()
        with pytest.raises(ModelError) as err:
            OpenAIModel(STEM, url, retries=1, backoff=0.1).generate(SHORT)
        assert str(err.value) == f"cannot reach {url}: connection refused — is the server running?"
        assert not isinstance(err.value, ContextOverflow) and time.monotonic() - start < 10


def test_tool_schemas_and_tool_results_reach_the_real_template(llama_url):
    model = OpenAIModel(ALIAS, llama_url)
    call = '<tool_call>\n{"name": "read", "arguments": {"path": "calc/stats.py"}}\n</tool_call>'
    result = "".join(f"{n:4d}  total = total + values[{n}]\n" for n in range(1, 21))
    asked = [{"role": "system", "content": "You fix failing tests."},
             {"role": "user", "content": "FAILED tests/test_stats.py::test_mean - assert 1.5 == 2"},
             {"role": "assistant", "content": call}]
    before = model.generate(asked, TOOLS, Sampling(max_tokens=8, seed=0))
    after = model.generate([*asked, {"role": "tool", "content": result}], TOOLS, Sampling(max_tokens=24, seed=0))
    # the tool result went into the prompt the server's own template rendered (and counted)
    assert after.prompt_tokens - before.prompt_tokens > len(result) // 6
    try:  # a 135M model rarely calls a tool; either way the harness gets a call or a one-line error
        parsed = parse_tool_call(after.text)
        assert parsed.name in {t["function"]["name"] for t in TOOLS}
    except ToolError as exc:
        assert "\n" not in str(exc)


def server_count(url: str, text: str) -> int:
    """Tokens of ``text`` by the server's own tokenizer (llama-cpp-python's /extras/tokenize/count)."""
    root = url.removesuffix("/v1")
    request = urllib.request.Request(f"{root}/extras/tokenize/count", json.dumps({"input": text}).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as resp:
        return json.loads(resp.read())["count"]


def test_a_stream_without_counts_is_counted_here(llama_url, smollm2_gguf):
    sampling = Sampling(max_tokens=24, seed=0)
    whole = OpenAIModel(ALIAS, llama_url).generate(SHORT, sampling=sampling)
    assert whole.prompt_tokens > 0 and 1 <= whole.completion_tokens <= 24  # counted by the server

    body = {"model": ALIAS, "messages": SHORT, "max_tokens": 4, "stream": True,
            "stream_options": {"include_usage": True}}
    request = urllib.request.Request(f"{llama_url}/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as resp:
        raw = resp.read().decode()
    assert '"usage"' not in raw  # llama-cpp-python ignores include_usage: this is why counting is needed

    # (the texts are not compared: llama.cpp's greedy choice may change with what its prompt cache holds)
    pieces: list[str] = []
    streamed = OpenAIModel(ALIAS, llama_url).generate(SHORT, sampling=sampling, on_text=pieces.append)
    assert "".join(pieces) == streamed.text and streamed.text
    # estimated (3 characters a token): the right size, so the episode's token budget counts it
    truth = server_count(llama_url, streamed.text)
    assert truth / 2 <= streamed.completion_tokens <= truth * 2
    assert whole.prompt_tokens / 2 <= streamed.prompt_tokens <= whole.prompt_tokens * 2

    # the served GGUF's own tokenizer (and chat template) counts as the server does
    exact = OpenAIModel(ALIAS, llama_url, tokenizer=str(smollm2_gguf)).generate(SHORT, sampling=sampling,
                                                                                 on_text=lambda t: None)
    assert abs(exact.prompt_tokens - whole.prompt_tokens) <= 1  # the server may count a BOS token
    assert abs(exact.completion_tokens - server_count(llama_url, exact.text)) <= 1


def test_a_prompt_longer_than_n_ctx_is_a_context_overflow(llama_url):
    model = OpenAIModel(ALIAS, llama_url)
    assert model.context_window is None  # llama-cpp-python reports its window nowhere
    with pytest.raises(ContextOverflow) as err:
        model.generate(LONG, sampling=Sampling(max_tokens=8))
    assert err.value.cause.startswith(f"This model's maximum context length is {N_CTX} tokens. However, you requested")
    assert err.value.window == N_CTX and model.context_window == N_CTX  # learned from the refusal

    streaming = OpenAIModel(ALIAS, llama_url)  # streamed, the server sends an empty 200: the cause is asked for
    with pytest.raises(ContextOverflow, match=f"maximum context length is {N_CTX} tokens"):
        streaming.generate(LONG, sampling=Sampling(max_tokens=8), on_text=lambda t: None)

    gen = model.generate(SHORT, sampling=Sampling(max_tokens=4000, seed=0))  # the server lives on
    assert gen.completion_tokens <= N_CTX - gen.prompt_tokens and gen.finish_reason in ("stop", "length")


UNFIXABLE = {  # no catalogue edit turns "bye" into "hello": only a model could fix it
    "greet.py": 'def greet(name):\n    return "bye " + name\n\n\ndef shout(name):\n    return "BYE " + name\n',
    "tests/test_greet.py": ("from greet import greet, shout\n\n\ndef test_greet():\n"
                            "    assert greet('ann') == 'hello ann'\n\n\n"
                            "def test_shout():\n    assert shout('ann') == 'HELLO ann'\n"),
    # no search (its result is known); 8 turns of 96 tokens outgrow 512 tokens by the fourth or so
    "pyproject.toml": "[tool.frognano]\nmax_candidates = 0\nmax_pairs = 0\nmax_turns = 8\nmax_new_tokens = 96\n",
}


def test_fix_whose_episodes_overflow_ends_unfixed_not_error(llama_url, tmp_path):
    project = write_project(tmp_path / "proj", UNFIXABLE)
    proc = subprocess.run([sys.executable, "-m", "frognano", "fix", str(project), "--model",
                           f"openai:{ALIAS}@{llama_url}", "--episodes", "2", "--json"],
                          capture_output=True, text=True, timeout=CHILD_TIMEOUT, env={**os.environ, "COLUMNS": "80"})
    out = json.loads(proc.stdout)
    assert (proc.returncode, out["status"]) == (1, "unfixed"), proc.stderr
    statuses = [e["status"] for e in out["episodes"]]
    assert len(statuses) == 2 and "context_overflow" in statuses, out["episodes"]
    overflowed = [e for e in out["episodes"] if e["status"] == "context_overflow"]
    assert all(f"maximum context length is {N_CTX} tokens" in e["error"] for e in overflowed)
    assert any(n.startswith("model episode ") and "context window" in n for n in out["notes"])
    assert "context_overflow" in out["message"]
