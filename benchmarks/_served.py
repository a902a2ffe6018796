"""The HTTP rows of ``harness.py``: FrogNano's ``OpenAIModel`` (``frognano/runtime/http.py``)
against a plain ``http.client`` POST of the same body to the same server, and the llama.cpp
server (llama-cpp-python's ``python -m llama_cpp.server``) the script starts for them.

Standard library only (the server runs in its own process).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from _speed import SHORT, Row, median_interleaved

log = logging.getLogger("benchmarks.harness")

ALIAS = "smollm2"  # the name the started server serves its model under (--model_alias)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def llama_server(gguf: Path, n_ctx: int = 4096, wait: float = 300.0) -> Iterator[str]:
    """A llama.cpp server (llama-cpp-python's) on a free port of 127.0.0.1 serving ``gguf`` as
    ``ALIAS``; yields its base URL and stops it afterwards."""
    port = free_port()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", ALIAS,
           "--n_ctx", str(n_ctx), "--port", str(port), "--host", "127.0.0.1"]
    url = f"http://127.0.0.1:{port}/v1"
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + wait
            while not _answers(url):
                if proc.poll() is not None or time.monotonic() > deadline:
                    out.seek(0)
                    tail = out.read().decode("utf-8", "replace").strip().splitlines()[-3:]
                    raise SystemExit(f"the llama.cpp server did not start ({' '.join(cmd)}): {' | '.join(tail)}")
                time.sleep(0.5)
            log.info("llama.cpp server on %s (%s)", url, gguf.name)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _answers(url: str) -> bool:
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=5)
    try:
        conn.request("GET", parts.path + "/models")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def body(model: str, messages: list[dict], n: int, *, stream: bool, tools: list[dict] | None = None) -> dict:
    """The request ``OpenAIModel.generate`` sends for greedy ``Sampling(max_tokens=n)``: the same
    keys in the same order (so the same bytes), tool results as user turns (``wire_messages``)."""
    from frognano.runtime.wire import wire_messages

    out: dict[str, Any] = {"model": model, "messages": wire_messages(messages), "temperature": 0.0, "top_p": 1.0,
                           "max_tokens": n, "stream": stream}
    if tools:
        out["tools"] = tools
    if stream:
        out["stream_options"] = {"include_usage": True}
    return out


def post_json(url: str, payload: dict) -> dict:
    """The whole (unstreamed) reply to ``payload``."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)
    try:
        conn.request("POST", parts.path + "/chat/completions", body=json.dumps(payload).encode(),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        raw = resp.read()
        if resp.status != 200:
            raise SystemExit(f"POST {url}/chat/completions: HTTP {resp.status}: {raw[:300]!r}")
        return json.loads(raw)
    finally:
        conn.close()


def plain_post(url: str, payload: dict, *, stream: bool) -> tuple[str, int | None]:
    """POST ``payload`` to ``url``/chat/completions with nothing but http.client: (text, the
    completion tokens the server counted, None when it sent no count)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)
    try:
        conn.request("POST", parts.path + "/chat/completions", body=json.dumps(payload).encode(),
                     headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise SystemExit(f"plain POST to {url}: HTTP {resp.status}: {resp.read()[:300]!r}")
        if not stream:
            data = json.loads(resp.read())
            return data["choices"][0]["message"].get("content") or "", data.get("usage", {}).get("completion_tokens")
        text, count = "", None
        for raw in resp:  # server-sent events, one "data: {...}" line each
            line = raw.decode("utf-8").strip()
            if not line.startswith("data:"):
                continue
            event = line[5:].strip()
            if event == "[DONE]":
                break
            data = json.loads(event)
            count = (data.get("usage") or {}).get("completion_tokens", count)
            for choice in data.get("choices") or []:
                text += (choice.get("delta") or {}).get("content") or ""
        return text, count
    finally:
        conn.close()


def decode_rows(spec: str, n: int, repeats: int) -> list[Row]:
    """``OpenAIModel.generate`` (greedy, N tokens, whole and streamed) against a plain POST of
    the same body; tokens per second of the whole call."""
    from frognano.runtime.base import Sampling
    from frognano.runtime.load import load_model
    from frognano.runtime.http import match_model

    model = load_model(spec)
    model.check_model()  # GET /models once, before anything is timed (generate does it on first use)
    served = match_model(model.served_models() or [], model.model) or model.model  # the id a request names
    sampling = Sampling(max_tokens=n)
    rows = []
    count = None
    for stream in (False, True):
        measure = f"decode, http{', streamed' if stream else ''} (N={n}, greedy)"
        payload = body(served, SHORT, n, stream=stream)
        pieces: list[str] = []

        def ours() -> tuple[str, float]:
            pieces.clear()
            t = time.perf_counter()
            gen = model.generate(SHORT, None, sampling, on_text=pieces.append if stream else None)
            return gen.text, time.perf_counter() - t

        def raw() -> tuple[str, float]:
            t = time.perf_counter()
            text, tokens = plain_post(model.base_url, payload, stream=stream)
            nonlocal count
            count = tokens if tokens is not None else count
            return text, time.perf_counter() - t

        ours_text, raw_text = ours()[0], raw()[0]
        if ours_text != raw_text:
            raise SystemExit(f"{measure}: OpenAIModel and the plain POST got different replies "
                             f"({ours_text[:60]!r} vs {raw_text[:60]!r}); the benchmark is broken")
        if count is None:
            return [*rows, Row.skipped(measure, "the server reported no token count")]
        t_ours, t_raw = median_interleaved(lambda: ours()[1], lambda: raw()[1], repeats)
        ratio = t_raw / t_ours
        rows.append(Row(measure, f"{count / t_ours:.1f} tok/s", "http.client POST, same body",
                        f"{count / t_raw:.1f} tok/s", ratio, ">= 0.95x", ratio >= 0.95,
                        f"{count} tokens; {(t_ours - t_raw) * 1000:+.1f} ms a call vs baseline"))
    model.close()
    return rows


def server_counter(spec: str) -> Callable[[list[dict], list[dict] | None], tuple[int, int | None]]:
    """``count(messages, tools)``: the prompt tokens the server counts in the request FrogNano
    sends it (``body``; one unstreamed token each); no character count (the server's text is not seen)."""
    from frognano.runtime.load import load_model
    from frognano.runtime.http import match_model

    model = load_model(spec)
    served = match_model(model.served_models() or [], model.model) or model.model

    def count(messages: list[dict], tools: list[dict] | None) -> tuple[int, int | None]:
        payload = body(served, messages, 1, stream=False, tools=tools)
        tokens = post_json(model.base_url, payload).get("usage", {}).get("prompt_tokens")
        if not isinstance(tokens, int):
            raise SystemExit(f"{model.base_url} reported no prompt token count; the benchmark is broken")
        return tokens, None

    return count
