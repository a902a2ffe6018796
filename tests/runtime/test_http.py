"""The OpenAI-compatible backend against real servers on 127.0.0.1.

Small stdlib ``http.server`` stubs script the awkward cases (dead, slow, garbage, 5xx, structured
tool calls); a real ``mlx_lm.server`` serving a tiny random model checks the happy paths end to
end.  Every server is started on a free localhost port and stopped in a ``finally``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from frognano.runtime.base import ContextOverflow, Model, ModelError, Sampling
from frognano.runtime.load import load_model
from frognano.runtime.http import DEFAULT_BASE_URL, OpenAIModel, match_model, split_spec

from .conftest import free_port

USER = [{"role": "user", "content": "Fix the failing test."}]
FAST = {"retries": 2, "backoff": 0.01}  # keeps retry tests quick


# -- a scripted stub server ----------------------------------------------------------------------


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # dict -> JSON; bytes/str -> as is
    events: list[Any] | None = None  # server-sent events: dicts as JSON, strings as is
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds before answering (woken early when the stub stops)
    hang_after: int | None = None  # stop sending after this many events and wait for stop


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


class Stub:
    """A ThreadingHTTPServer whose replies come from ``respond(request, n)``; n counts requests."""

    def __init__(self, respond: Callable[[Request, int], Reply | dict]) -> None:
        self.respond = respond
        self.requests: list[Request] = []
        self.stopping = threading.Event()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep pytest output clean
                pass

            def do_GET(self) -> None:
                self._answer()

            def do_POST(self) -> None:
                self._answer()

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                request = Request(self.command, self.path, dict(self.headers), json.loads(raw) if raw else None)
                stub.requests.append(request)
                reply = stub.respond(request, len(stub.requests))
                if isinstance(reply, dict):
                    reply = Reply(body=reply)
                if reply.delay and stub.stopping.wait(reply.delay):
                    return
                try:
                    self._send(reply)
                except OSError:  # the client hung up (timeouts, cancels): expected here
                    pass

            def _send(self, reply: Reply) -> None:
                self.send_response(reply.status)
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                if reply.events is not None:
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    for i, event in enumerate(reply.events):
                        if reply.hang_after is not None and i >= reply.hang_after:
                            stub.stopping.wait(30)
                            return
                        if isinstance(event, str) and event.startswith(":"):  # an SSE comment
                            self.wfile.write(f"{event}\n\n".encode())
                        else:
                            data = event if isinstance(event, str) else json.dumps(event)
                            self.wfile.write(f"data: {data}\n\n".encode())
                        self.wfile.flush()
                    self.close_connection = True
                    return
                body = reply.body
                raw = json.dumps(body).encode() if isinstance(body, (dict, list)) else (
                    body.encode() if isinstance(body, str) else (body or b""))
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def posts(self) -> list[Request]:
        return [r for r in self.requests if r.method == "POST"]

    def __enter__(self) -> Stub:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def completion(content: str | None = "hello", tool_calls: list[dict] | None = None, finish: str = "stop",
               usage: tuple[int, int] | None = (7, 3)) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    body: dict[str, Any] = {"id": "c1", "object": "chat.completion",
                            "choices": [{"index": 0, "message": message, "finish_reason": finish}]}
    if usage:
        body["usage"] = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
    return body


def chunk(content: str | None = None, tool_calls: list[dict] | None = None, finish: str | None = None) -> dict:
    delta: dict[str, Any] = {}
    if content is not None:
        delta["content"] = content
    if tool_calls is not None:
        delta["tool_calls"] = tool_calls
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def lists_models(*ids: str) -> Reply:
    return Reply(body={"object": "list", "data": [{"id": i, "object": "model"} for i in ids]})


# -- SPEC ----------------------------------------------------------------------------------------


def test_spec_model_at_url_and_the_local_default():
    assert split_spec("qwen2.5-coder:1.5b@http://localhost:11434/v1") == ("qwen2.5-coder:1.5b", "http://localhost:11434/v1")
    assert split_spec("org/model@https://example.test/v1/") == ("org/model", "https://example.test/v1")
    assert split_spec("qwen3") == ("qwen3", DEFAULT_BASE_URL)
    assert DEFAULT_BASE_URL.startswith("http://127.0.0.1:")  # offline by default
    assert split_spec("m@localhost:8000/v1") == ("m", "http://localhost:8000/v1")
    for bad in ("@http://localhost:1/v1", "m@ftp://host/v1", "m@http://host:port/v1"):
        with pytest.raises(ModelError):
            split_spec(bad)


def test_load_model_builds_the_backend_without_touching_the_network():
    model = load_model("openai:qwen2.5-coder:1.5b@http://127.0.0.1:9/v1", timeout=5)
    assert isinstance(model, OpenAIModel) and isinstance(model, Model)
    assert model.name == "openai:qwen2.5-coder:1.5b@http://127.0.0.1:9/v1"
    assert model.timeout == 5 and model.retries == 3
    with pytest.raises(ModelError, match="unknown option.*temprature"):
        load_model("openai:m", temprature=0.5)


def test_api_key_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with Stub(lambda r, n: completion()) as stub:
        OpenAIModel("m", stub.url, model_check=False).generate(USER)
        assert stub.requests[0].headers["Authorization"] == "Bearer sk-test"
    monkeypatch.delenv("OPENAI_API_KEY")
    with Stub(lambda r, n: completion()) as stub:
        OpenAIModel("m", stub.url, model_check=False).generate(USER)
        assert "Authorization" not in stub.requests[0].headers


# -- failures ------------------------------------------------------------------------------------


def test_dead_endpoint_is_a_quick_clear_error():
    url = f"http://127.0.0.1:{free_port()}/v1"
    model = OpenAIModel("m", url, **FAST)
    start = time.monotonic()
    with pytest.raises(ModelError) as err:
        model.generate(USER)
    assert str(err.value) == f"cannot reach {url}: connection refused — is the server running?"
    assert time.monotonic() - start < 10


def test_slow_endpoint_times_out_and_is_not_retried():
    with Stub(lambda r, n: Reply(body=completion(), delay=10)) as stub:
        model = OpenAIModel("m", stub.url, timeout=0.3, model_check=False, **FAST)
        start = time.monotonic()
        with pytest.raises(ModelError, match=r"did not answer within 0.3 s"):
            model.generate(USER)
        assert time.monotonic() - start < 10
        assert len(stub.posts()) == 1


def test_a_stream_that_stalls_times_out():
    events = [chunk("a"), chunk("b"), chunk(finish="stop"), "[DONE]"]
    with Stub(lambda r, n: Reply(events=events, hang_after=1)) as stub:
        pieces: list[str] = []
        model = OpenAIModel("m", stub.url, timeout=0.3, model_check=False)
        with pytest.raises(ModelError, match="did not answer within 0.3 s"):
            model.generate(USER, on_text=pieces.append)
        assert pieces == ["a"]


def test_garbage_and_malformed_replies_are_model_errors():
    with Stub(lambda r, n: Reply(body=b"<html>502 gateway</html>")) as stub:
        with pytest.raises(ModelError, match="not JSON: '<html>502 gateway</html>'"):
            OpenAIModel("m", stub.url, model_check=False).generate(USER)
        assert len(stub.posts()) == 1  # a 200 with garbage is not transient
    with Stub(lambda r, n: Reply(body={"id": "x", "choices": []})) as stub:
        with pytest.raises(ModelError, match="malformed reply: no choices"):
            OpenAIModel("m", stub.url, model_check=False).generate(USER)
    with Stub(lambda r, n: Reply(events=[chunk("a"), "{not json"])) as stub:
        with pytest.raises(ModelError, match="not JSON"):
            OpenAIModel("m", stub.url, model_check=False).generate(USER, on_text=lambda t: None)
    with Stub(lambda r, n: Reply(events=[chunk("a")])) as stub:  # the connection closes mid-answer
        with pytest.raises(ModelError, match="closed the stream before it finished"):
            OpenAIModel("m", stub.url, model_check=False).generate(USER, on_text=lambda t: None)


def test_5xx_and_429_are_retried():
    def flaky(request: Request, n: int) -> Reply:
        if n == 1:
            return Reply(status=500, body={"error": {"message": "warming up"}})
        if n == 2:
            return Reply(status=429, body={"error": "slow down"}, headers={"Retry-After": "0"})
        return Reply(body=completion("fine"))

    with Stub(flaky) as stub:
        gen = OpenAIModel("m", stub.url, model_check=False, **FAST).generate(USER)
        assert gen.text == "fine" and len(stub.posts()) == 3

    with Stub(lambda r, n: Reply(status=503, body={"error": {"message": "overloaded"}})) as stub:
        with pytest.raises(ModelError, match=r"HTTP 503: overloaded"):
            OpenAIModel("m", stub.url, model_check=False, **FAST).generate(USER)
        assert len(stub.posts()) == 3  # the first try and two retries


def test_4xx_is_reported_with_the_servers_message_and_not_retried():
    with Stub(lambda r, n: Reply(status=400, body={"error": {"message": "temperature\nout of range"}})) as stub:
        with pytest.raises(ModelError) as err:
            OpenAIModel("m", stub.url, model_check=False, **FAST).generate(USER)
        assert str(err.value) == f"POST {stub.url}/chat/completions: HTTP 400: temperature out of range"
        assert not isinstance(err.value, ContextOverflow)  # a refused request, not a full context
        assert len(stub.posts()) == 1
    with Stub(lambda r, n: Reply(status=404, body={"error": "model 'm' not found"})) as stub:
        with pytest.raises(ModelError) as err:
            OpenAIModel("m", stub.url, model_check=False, **FAST).generate(USER)
        assert str(err.value) == (
            f"model m is not served by {stub.url} (POST /chat/completions: HTTP 404: model 'm' not found)"
            " — check the name, and that the base URL is the API root (it usually ends in /v1)"
        )
        assert len(stub.posts()) == 1
    with Stub(lambda r, n: Reply(status=401, body={"error": {"message": "bad key"}})) as stub:
        with pytest.raises(ModelError, match="HTTP 401: bad key — check the api_key"):
            OpenAIModel("m", stub.url, model_check=False, **FAST).generate(USER)


def test_model_check_uses_the_listing_once():
    def server(request: Request, n: int) -> Reply:
        return lists_models("qwen3:0.6b", "llama3:latest") if request.method == "GET" else Reply(body=completion())

    with Stub(server) as stub:
        with pytest.raises(ModelError) as err:
            OpenAIModel("qwen9", stub.url).generate(USER)
        assert str(err.value) == f"model qwen9 is not served by {stub.url} (it serves: qwen3:0.6b, llama3:latest)"
        assert stub.posts() == []
        model = OpenAIModel("llama3", stub.url)  # Ollama's implicit :latest
        model.generate(USER)
        model.generate(USER)
        # the listing, llama-server's /props (for the context window; 200 here but no n_ctx), two replies
        assert [(r.method, r.path) for r in stub.requests[1:]] == [
            ("GET", "/v1/models"), ("GET", "/props"), ("POST", "/v1/chat/completions"),
            ("POST", "/v1/chat/completions")]
        assert [r.body["model"] for r in stub.posts()] == ["llama3:latest"] * 2  # the listed id is sent
        assert model.context_window is None
        OpenAIModel("anything", stub.url, model_check=False).generate(USER)

    # servers that do not list (404) or list nothing are accepted
    with Stub(lambda r, n: Reply(status=404, body=b"Not Found") if r.method == "GET" else completion()) as stub:
        assert OpenAIModel("m", stub.url).generate(USER).text == "hello"
    with Stub(lambda r, n: lists_models() if r.method == "GET" else completion()) as stub:
        assert OpenAIModel("m", stub.url).generate(USER).text == "hello"


# -- model names, context windows, counts (what a real llama.cpp server does) ------------------------

GGUF_ID = "/models/smol/SmolLM2-135M-Instruct.Q4_1.gguf"  # llama-cpp-python lists the path it was started with
# llama-cpp-python's own words (llama_cpp/server/errors.py) for a prompt longer than --n_ctx
OVERFLOW_400 = Reply(status=400, body={"error": {
    "message": "This model's maximum context length is 512 tokens. However, you requested 739 tokens "
               "(731 in the messages, 8 in the completion). Please reduce the length of the messages or completion.",
    "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}})


def llama_cpp_python(reply: Callable[[Request, int], Reply | dict]) -> Callable[[Request, int], Reply | dict]:
    """A stub that lists one GGUF by path and has no /props, as llama-cpp-python's server."""
    def respond(request: Request, n: int) -> Reply | dict:
        if request.path == "/v1/models":
            return lists_models(GGUF_ID)
        if request.method == "GET":
            return Reply(status=404, body={"detail": "Not Found"})
        return reply(request, n)
    return respond


def test_a_model_listed_by_path_is_matched_by_its_file_name():
    assert match_model([GGUF_ID], "SmolLM2-135M-Instruct.Q4_1.gguf") == GGUF_ID
    assert match_model([GGUF_ID], "SmolLM2-135M-Instruct.Q4_1") == GGUF_ID  # the stem
    assert match_model([GGUF_ID], "/elsewhere/SmolLM2-135M-Instruct.Q4_1.gguf") == GGUF_ID
    assert match_model(["qwen", "llama3:latest"], "llama3") == "llama3:latest"
    assert match_model([GGUF_ID], "smollm2") is None  # no guessing beyond the file's name
    with pytest.raises(ModelError, match="names several served models"):
        match_model(["/a/m.gguf", "/b/m.gguf"], "m")

    with Stub(llama_cpp_python(lambda r, n: completion())) as stub:
        OpenAIModel("SmolLM2-135M-Instruct.Q4_1", stub.url).generate(USER)
        assert stub.posts()[0].body["model"] == GGUF_ID  # the id the server listed goes back to it
        with pytest.raises(ModelError) as err:
            OpenAIModel("smollm2", stub.url).generate(USER)
    assert str(err.value) == (
        f"model smollm2 is not served by {stub.url} (it serves: {GGUF_ID}); name it by its file name, or start "
        "llama-cpp-python's server with --model_alias smollm2 (llama-server: --alias smollm2)")
    assert len(stub.posts()) == 1


def test_spec_options_after_the_hash(tmp_path):
    model = load_model("openai:smollm2@http://127.0.0.1:9/v1#context=2048")
    assert (model.model, model.base_url, model.context, model.context_window) == (
        "smollm2", "http://127.0.0.1:9/v1", 2048, 2048)
    assert model.name == "openai:smollm2@http://127.0.0.1:9/v1"
    assert load_model("openai:m#context=64").base_url == DEFAULT_BASE_URL
    tokenizer = tmp_path / "tok"
    tokenizer.mkdir()
    assert load_model(f"openai:m@http://h/v1#context=64, tokenizer={tokenizer}").counter.path == tokenizer
    with pytest.raises(ModelError, match=r"'ctx=5' is not an option \(known: context= .*, tokenizer= "):
        load_model("openai:m@http://h/v1#ctx=5")
    with pytest.raises(ModelError, match="context must be a whole number of tokens, got '2k'"):
        load_model("openai:m@http://h/v1#context=2k")
    with pytest.raises(ModelError, match="context must be a whole number of tokens, at least 1, got 0"):
        load_model("openai:m@http://h/v1#context=0")
    with pytest.raises(ModelError, match="tokenizer /no/such: no such file or folder"):
        load_model("openai:m@http://h/v1#tokenizer=/no/such")


def test_the_servers_context_window_is_read_and_max_tokens_cut_to_fit():
    vllm = {"object": "list", "data": [{"id": "m", "object": "model", "max_model_len": 400}]}
    with Stub(lambda r, n: Reply(body=vllm) if r.method == "GET" else completion()) as stub:
        model = OpenAIModel("m", stub.url)
        model.generate(USER, sampling=Sampling(max_tokens=500))  # the prompt: ~15 tokens of 400
        assert model.context_window == 400 and stub.posts()[0].body["max_tokens"] == 385
        assert [r.path for r in stub.requests if r.method == "GET"] == ["/v1/models"]  # no /props needed

    props = {"default_generation_settings": {"n_ctx": 4096}, "total_slots": 1}  # llama.cpp's llama-server
    with Stub(lambda r, n: lists_models("m") if r.path == "/v1/models" else
              (Reply(body=props) if r.path == "/props" else completion())) as stub:
        model = OpenAIModel("m", stub.url)
        model.generate(USER, sampling=Sampling(max_tokens=500))
        assert model.context_window == 4096 and stub.posts()[0].body["max_tokens"] == 500

    # the option wins over a larger window the server states; an estimate never cuts a reply below 64
    # tokens (the server, whose word is final, refuses what does not fit)
    with Stub(lambda r, n: Reply(body=vllm) if r.method == "GET" else completion()) as stub:
        model = OpenAIModel("m", stub.url, context=10)
        model.generate(USER, sampling=Sampling(max_tokens=500))
        assert model.context_window == 10 and stub.posts()[0].body["max_tokens"] == 64


def test_an_overflow_is_its_own_error_and_teaches_the_window():
    long = [{"role": "user", "content": "word " * 600}]
    with Stub(llama_cpp_python(lambda r, n: OVERFLOW_400 if len(json.dumps(r.body["messages"])) > 2000
                               else completion())) as stub:
        model = OpenAIModel("SmolLM2-135M-Instruct.Q4_1.gguf", stub.url, **FAST)
        assert model.context_window is None
        with pytest.raises(ContextOverflow) as err:
            model.generate(long)
        assert len(stub.posts()) == 1  # not retried: it would overflow again
        assert err.value.cause.startswith("This model's maximum context length is 512 tokens. However, you requested")
        assert str(err.value).startswith(f"{stub.url}: the prompt does not fit the model's context window (HTTP 400: "
                                         "This model's maximum context length is 512 tokens.")
        assert err.value.window == 512 and model.context_window == 512
        model.generate(USER, sampling=Sampling(max_tokens=1000))  # now cut to fit before sending
        assert stub.posts()[-1].body["max_tokens"] == 512 - 15


def test_an_empty_stream_is_asked_again_for_its_cause():
    def server(request: Request, n: int) -> Reply | dict:
        if request.body["stream"]:
            return Reply(events=[])  # llama-cpp-python: the overflow raised before the first chunk
        return OVERFLOW_400

    with Stub(llama_cpp_python(server)) as stub:
        with pytest.raises(ContextOverflow, match="maximum context length is 512 tokens") as err:
            OpenAIModel("SmolLM2-135M-Instruct.Q4_1", stub.url).generate(USER, on_text=lambda t: None)
        probe = stub.posts()[1].body
        assert (probe["stream"], probe["max_tokens"], "stream_options" in probe) == (False, 1, False)
        assert err.value.window == 512

    with Stub(lambda r, n: Reply(events=[]) if r.body["stream"] else completion()) as stub:  # a cause-less empty stream
        with pytest.raises(ModelError, match="ended a stream without sending anything") as err:
            OpenAIModel("m", stub.url, model_check=False).generate(USER, on_text=lambda t: None)
        assert not isinstance(err.value, ContextOverflow)


def test_an_uncounted_stream_is_counted_so_the_budget_can_trip():
    events = [chunk("<tool_call>"), chunk('{"name": "read"}'), chunk("</tool_call>", finish="stop"), "[DONE]"]
    with Stub(lambda r, n: Reply(events=events) if r.body["stream"] else completion("hi", usage=(300, 1))) as stub:
        model = OpenAIModel("m", stub.url, model_check=False)
        gen = model.generate(USER, on_text=lambda t: None)
        assert (gen.prompt_tokens, gen.completion_tokens) == (15, 13)  # 39 characters of reply, at 3 a token
        # a prompt the server counted anchors the estimate: the next turn is that count plus the new messages
        model.generate(USER)
        turn2 = [*USER, {"role": "assistant", "content": "x" * 30}, {"role": "user", "content": "y" * 30}]
        assert model.generate(turn2, on_text=lambda t: None).prompt_tokens == 300 + 2 * (10 + 4)
        assert model.generate([{"role": "user", "content": "z" * 30}], on_text=lambda t: None).prompt_tokens == 18


def test_the_tokenizer_option_counts_with_the_models_own_tokenizer(tiny_torch):
    pytest.importorskip("transformers")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_torch))
    events = [chunk("def mean(xs):"), chunk(" return sum(xs)", finish="stop"), "[DONE]"]
    with Stub(lambda r, n: Reply(events=events)) as stub:
        model = OpenAIModel("m", stub.url, model_check=False, tokenizer=str(tiny_torch))
        gen = model.generate(USER, on_text=lambda t: None)
        prompt = len(tok.encode(tok.apply_chat_template(USER, tokenize=False, add_generation_prompt=True),
                                add_special_tokens=False))
        assert gen.prompt_tokens == prompt
        assert gen.completion_tokens == len(tok.encode("def mean(xs): return sum(xs)", add_special_tokens=False))

        # an exact count cuts max_tokens to the very token, and refuses a prompt that alone cannot fit
        model.context = prompt + 5
        model.generate(USER, sampling=Sampling(max_tokens=100), on_text=lambda t: None)
        assert stub.posts()[-1].body["max_tokens"] == 5
        model.context = prompt
        with pytest.raises(ContextOverflow) as err:
            model.generate(USER, on_text=lambda t: None)
        assert str(err.value) == (f"{stub.url}: the prompt ({prompt} tokens) does not fit the context window of "
                                  f"{prompt} tokens")
        assert len(stub.posts()) == 2 and err.value.window == prompt


# -- an overflow in an episode and in a fix ---------------------------------------------------------


READ_CALL = '<tool_call>\n{"name": "read", "arguments": {"path": "greet.py"}}\n</tool_call>'
UNFIXABLE = {  # no catalogue edit turns "bye" into "hello"
    "greet.py": 'def greet(name):\n    return "bye " + name\n',
    "tests/test_greet.py": "from greet import greet\n\n\ndef test_greet():\n    assert greet('ann') == 'hello ann'\n",
}


def fix_with(project, url: str, episodes: int = 2):
    from frognano.config import Settings
    from frognano.repair.engine import Engine
    from frognano.sandbox.workspace import Workspace

    settings = Settings(max_candidates=0, max_pairs=0, episodes=episodes, max_turns=4)
    with Workspace(project) as ws, Engine(ws, settings, model=OpenAIModel("m", url, **FAST)) as engine:
        return engine.fix()


def test_an_overflow_ends_the_episode_and_the_next_one_runs(make_project):
    from frognano.repair.agent import EpisodeStatus

    # the second turn of every episode outgrows the window (its prompt holds the first tool result)
    respond = llama_cpp_python(lambda r, n: OVERFLOW_400 if len(r.body["messages"]) > 2 else completion(READ_CALL))
    with Stub(lambda r, n: respond(r, n) if r.path != "/v1/models" else lists_models("m")) as stub:
        report = fix_with(make_project(UNFIXABLE), stub.url)
    assert [e.status for e in report.episodes] == [EpisodeStatus.CONTEXT_OVERFLOW] * 2
    assert [len(e.turns) for e in report.episodes] == [1, 1]
    assert (report.status, report.exit_code) == ("unfixed", 1)  # the search's outcome, not an error
    assert report.message.endswith("2 model episodes ended context_overflow, context_overflow")
    cause = "the prompt does not fit the model's context window (HTTP 400: This model's maximum context length is 512"
    assert all(cause in e.error for e in report.episodes)
    assert [n.split(":")[0] for n in report.notes if cause in n] == ["model episode 1", "model episode 2"]
    out = report.to_json()
    assert out["status"] == "unfixed" and cause in out["episodes"][0]["error"]


def test_a_broken_model_mid_episode_is_still_the_runs_error(make_project):
    broken = Reply(status=400, body={"error": {"message": "unknown field: tools"}})
    with Stub(lambda r, n: lists_models("m") if r.method == "GET" else
              (broken if len(r.body["messages"]) > 2 else completion(READ_CALL))) as stub:
        report = fix_with(make_project(UNFIXABLE), stub.url)
    assert (report.status, report.exit_code) == ("error", 2)
    assert "HTTP 400: unknown field: tools" in report.message and len(report.episodes) == 1


# -- requests and replies ------------------------------------------------------------------------

READ = {"type": "function", "function": {"name": "read", "description": "Read lines.",
                                          "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}


def test_request_carries_messages_tools_and_sampling():
    with Stub(lambda r, n: completion()) as stub:
        sampling = Sampling(temperature=0.7, top_p=0.9, max_tokens=33, seed=5, stop=["</tool_call>"])
        gen = OpenAIModel("m", stub.url, model_check=False).generate(USER, [READ], sampling)
        body = stub.requests[0].body
        assert stub.requests[0].path == "/v1/chat/completions"
        assert body["model"] == "m" and body["messages"] == USER and body["tools"] == [READ]
        assert (body["temperature"], body["top_p"], body["max_tokens"], body["seed"], body["stop"]) == (
            0.7, 0.9, 33, 5, ["</tool_call>"])
        assert body["stream"] is False
        assert (gen.text, gen.finish_reason, gen.prompt_tokens, gen.completion_tokens) == ("hello", "stop", 7, 3)


def test_tools_in_the_prompt_for_a_server_whose_template_ignores_them():
    """``#tools=prompt``: the schemas go into the system prompt (as the in-process backends put
    them for such a template), and no tools= is sent."""
    from frognano.runtime.prompt import tools_block

    messages = [{"role": "system", "content": "Fix it."}, *USER]
    with Stub(lambda r, n: completion()) as stub:
        load_model(f"openai:m@{stub.url}#tools=prompt").generate(messages, [READ])
        body = stub.requests[-1].body
        assert "tools" not in body
        assert body["messages"][0] == {"role": "system", "content": "Fix it.\n\n" + tools_block([READ])}
        assert body["messages"][1:] == USER
    with pytest.raises(ModelError, match="tools must be server or prompt, got 'both'"):
        load_model("openai:m@http://h/v1#tools=both")


def test_missing_usage_is_estimated_and_length_is_kept():
    with Stub(lambda r, n: completion("abcdef", finish="length", usage=None)) as stub:
        gen = OpenAIModel("m", stub.url, model_check=False).generate(USER)
    # 21 characters of prompt at 3 a token + 4 per message and the assistant's opening; 6 of reply
    assert (gen.text, gen.finish_reason, gen.prompt_tokens, gen.completion_tokens) == ("abcdef", "length", 15, 2)


def test_structured_tool_calls_become_qwen_text():
    calls = [
        {"id": "1", "type": "function", "function": {"name": "read", "arguments": '{"path": "a.py", "start": 1}'}},
        {"id": "2", "type": "function",
         "function": {"name": "edit", "arguments": {"path": "é.py", "old": "<", "new": "<="}}},
    ]
    with Stub(lambda r, n: completion(None, calls, finish="tool_calls")) as stub:
        gen = OpenAIModel("m", stub.url, model_check=False).generate(USER, [READ])
    assert gen.text == (
        '<tool_call>\n{"name": "read", "arguments": {"path": "a.py", "start": 1}}\n</tool_call>\n'
        '<tool_call>\n{"name": "edit", "arguments": {"path": "é.py", "old": "<", "new": "<="}}\n</tool_call>'
    )
    assert gen.finish_reason == "stop"

    garbled = [{"type": "function", "function": {"name": "read", "arguments": "{path: a.py"}}]
    with Stub(lambda r, n: completion("Let me look.", garbled)) as stub:
        gen = OpenAIModel("m", stub.url, model_check=False).generate(USER, [READ])
    assert gen.text == 'Let me look.\n<tool_call>\n{"name": "read", "arguments": "{path: a.py"}\n</tool_call>'


def test_streamed_tool_calls_and_text_join_up():
    events = [
        ": keepalive 10/20",
        chunk("Looking"),
        chunk(" now."),
        chunk(tool_calls=[{"index": 0, "id": "1", "type": "function", "function": {"name": "read", "arguments": ""}}]),
        chunk(tool_calls=[{"index": 0, "function": {"arguments": '{"path": '}}]),
        chunk(tool_calls=[{"index": 0, "function": {"arguments": '"a.py"}'}}]),
        chunk(finish="tool_calls"),
        {"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 9}},
        "[DONE]",
    ]

    with Stub(lambda r, n: Reply(events=events)) as stub:
        pieces: list[str] = []
        gen = OpenAIModel("m", stub.url, model_check=False).generate(USER, [READ], on_text=pieces.append)
        body = stub.requests[0].body
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert gen.text == 'Looking now.\n<tool_call>\n{"name": "read", "arguments": {"path": "a.py"}}\n</tool_call>'
    assert "".join(pieces) == gen.text and pieces[:2] == ["Looking", " now."]
    assert (gen.finish_reason, gen.prompt_tokens, gen.completion_tokens) == ("stop", 11, 9)


def test_a_server_that_ignores_stream_still_feeds_on_text():
    with Stub(lambda r, n: completion("whole")) as stub:
        pieces: list[str] = []
        gen = OpenAIModel("m", stub.url, model_check=False).generate(USER, on_text=pieces.append)
    assert pieces == ["whole"] and gen.text == "whole"


def test_cancel_wakes_a_blocked_read():
    events = [chunk("first"), chunk("never"), chunk(finish="stop"), "[DONE]"]
    with Stub(lambda r, n: Reply(events=events, hang_after=1)) as stub:
        cancel = threading.Event()
        pieces: list[str] = []

        def on_text(piece: str) -> None:
            pieces.append(piece)
            threading.Timer(0.1, cancel.set).start()  # the server now sends nothing more

        start = time.monotonic()
        gen = OpenAIModel("m", stub.url, timeout=30, model_check=False).generate(USER, on_text=on_text, cancel=cancel)
        assert time.monotonic() - start < 10
    assert (gen.text, gen.finish_reason, pieces) == ("first", "cancelled", ["first"])

    with Stub(lambda r, n: Reply(body=completion(), delay=30)) as stub:  # not streaming: waiting for the reply
        cancel = threading.Event()
        threading.Timer(0.2, cancel.set).start()
        start = time.monotonic()
        gen = OpenAIModel("m", stub.url, timeout=30, model_check=False).generate(USER, cancel=cancel)
        assert gen.finish_reason == "cancelled" and time.monotonic() - start < 10

    already = threading.Event()
    already.set()
    gen = OpenAIModel("m", f"http://127.0.0.1:{free_port()}/v1").generate(USER, cancel=already)
    assert (gen.text, gen.finish_reason) == ("", "cancelled")


def test_cancel_interrupts_the_backoff():
    with Stub(lambda r, n: Reply(status=503, body={"error": "busy"})) as stub:
        cancel = threading.Event()
        threading.Timer(0.2, cancel.set).start()
        start = time.monotonic()
        gen = OpenAIModel("m", stub.url, retries=5, backoff=10, model_check=False).generate(USER, cancel=cancel)
        assert gen.finish_reason == "cancelled" and time.monotonic() - start < 10
        assert len(stub.posts()) == 1


# -- a real mlx_lm.server ------------------------------------------------------------------------


@pytest.mark.slow
def test_mlx_server_generates_with_and_without_streaming(mlx_server):
    url, model_id = mlx_server
    model = load_model(f"openai:{model_id}@{url}")
    sampling = Sampling(max_tokens=12, seed=0)

    gen = model.generate(USER, sampling=sampling)
    assert gen.text  # random weights: garbage, but some
    assert gen.prompt_tokens > 0 and 1 <= gen.completion_tokens <= 12
    assert gen.finish_reason in ("stop", "length")

    pieces: list[str] = []
    streamed = model.generate(USER, sampling=sampling, on_text=pieces.append)
    assert "".join(pieces) == streamed.text
    assert streamed.text == gen.text  # greedy: the same reply either way
    assert (streamed.prompt_tokens, streamed.completion_tokens) == (gen.prompt_tokens, gen.completion_tokens)


@pytest.mark.slow
def test_mlx_server_stream_can_be_cancelled(mlx_server):
    url, model_id = mlx_server
    model = OpenAIModel(model_id, url)
    cancel = threading.Event()
    pieces: list[str] = []

    def on_text(piece: str) -> None:
        pieces.append(piece)
        cancel.set()

    gen = model.generate(USER, sampling=Sampling(max_tokens=2000), on_text=on_text, cancel=cancel)
    assert gen.finish_reason == "cancelled"
    assert len(pieces) == 1 and gen.text == pieces[0]
    # the server shrugs off the dropped connection and answers the next request
    assert model.generate(USER, sampling=Sampling(max_tokens=2)).completion_tokens >= 1


@pytest.mark.slow
def test_mlx_server_model_check(mlx_server):
    url, model_id = mlx_server
    OpenAIModel(model_id, url).check_model()
    with pytest.raises(ModelError) as err:
        OpenAIModel("no-such-model", url).generate(USER)
    assert str(err.value) == f"model no-such-model is not served by {url} (it serves: {model_id})"
    # without the check, the server itself refuses (it fails to load the name, offline, and says 404)
    refused = rf"^model no-such-model is not served by {url} \(POST /chat/completions: HTTP 404"
    with pytest.raises(ModelError, match=refused):
        OpenAIModel("no-such-model", url, model_check=False).generate(USER)
    assert OpenAIModel(model_id, url).generate(USER, sampling=Sampling(max_tokens=2)).completion_tokens >= 1
