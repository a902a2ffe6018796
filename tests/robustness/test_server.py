"""The language server keeps answering: bad frames, ill-typed params and a seeded fuzz, sent as
raw bytes to the real ``frognano serve`` over its stdin.

Each case asserts that the process is still alive and that a valid request sent after the bad
input is answered.  ``RawServer`` is a minimal client: it writes bytes exactly as a test hands
them over (pytest-lsp would only ever write well-formed frames) and reads the server's frames on
a thread, answering the server's own requests with ``null`` like an editor would.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
HOVER = "textDocument/hover"
UNTITLED = "untitled:Untitled-1"


def frame(body: Any, *, length: int | None = None, header: str = "Content-Length", eol: bytes = b"\r\n") -> bytes:
    """One LSP frame; ``length``, ``header`` and ``eol`` exist to get it wrong."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    size = len(data) if length is None else length
    return f"{header}: {size}".encode() + eol + eol + data


def message(method: str, params: Any = None, msg_id: Any = None) -> dict:
    msg: dict = {"jsonrpc": "2.0", "method": method}
    if msg_id is not None:
        msg["id"] = msg_id
    if params is not None:
        msg["params"] = params
    return msg


def hover_params(line: Any = 0, character: Any = 0, uri: Any = UNTITLED) -> dict:
    return {"textDocument": {"uri": uri}, "position": {"line": line, "character": character}}


def same_id(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b  # 1, 1.0 and True are different ids


class RawServer:
    """``frognano serve`` over pipes, spoken to in raw bytes."""

    def __init__(self, cwd: Path) -> None:
        self.stderr_path = cwd / "serve.stderr"
        self._stderr = open(self.stderr_path, "wb")  # a file, not a pipe: it can never fill up and block the server
        self.proc = subprocess.Popen([sys.executable, "-m", "frognano", "serve"], cwd=cwd,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr)
        self.received: list[dict] = []
        self._cond = threading.Condition()
        self._write_lock = threading.Lock()
        self._ids = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    # -- wire ---------------------------------------------------------------------------------
    def _read(self) -> None:
        out = self.proc.stdout
        assert out is not None
        while True:
            length = None
            while True:
                line = out.readline()
                if not line:
                    return
                if not line.strip():
                    break
                name, _, value = line.decode("ascii").partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            assert length is not None, "the server wrote a frame without Content-Length"
            msg = json.loads(out.read(length))
            if "method" in msg and "id" in msg:  # the server asks something: answer like an editor
                self.send(frame({"jsonrpc": "2.0", "id": msg["id"], "result": None}))
            with self._cond:
                self.received.append(msg)
                self._cond.notify_all()

    def send(self, data: bytes) -> None:
        with self._write_lock:
            assert self.proc.stdin is not None
            self.proc.stdin.write(data)
            self.proc.stdin.flush()

    def next_id(self) -> int:
        self._ids += 1
        return self._ids

    def request(self, method: str, params: Any = None) -> int:
        msg_id = self.next_id()
        self.send(frame(message(method, params, msg_id)))
        return msg_id

    def notify(self, method: str, params: Any = None) -> None:
        self.send(frame(message(method, params)))

    # -- reading answers ----------------------------------------------------------------------
    def responses(self, msg_id: Any = None) -> list[dict]:
        with self._cond:
            return [m for m in self.received if "method" not in m and same_id(m.get("id"), msg_id)]

    def response(self, msg_id: Any, timeout: float = 15.0) -> dict:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = [m for m in self.received if "method" not in m and same_id(m.get("id"), msg_id)]
                if found:
                    return found[0]
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    state = "alive" if self.proc.poll() is None else f"exited {self.proc.returncode}"
                    raise AssertionError(f"no answer to request {msg_id!r} within {timeout:g} s (server {state})"
                                         f"\n--- stderr tail ---\n{self.stderr()[-3000:]}")
                self._cond.wait(min(left, 0.2))

    def errors(self, code: int) -> list[dict]:
        with self._cond:
            return [m for m in self.received if (m.get("error") or {}).get("code") == code]

    def stderr(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    # -- lifecycle ----------------------------------------------------------------------------
    def initialize(self) -> None:
        """No workspace folder and no client capabilities: nothing the fuzz sends can start a test run."""
        answer = self.response(self.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}}), 60)
        assert "result" in answer, answer
        self.notify("initialized", {})

    def assert_serving(self, timeout: float = 15.0) -> None:
        """Alive, and a valid request sent now gets its real answer."""
        assert self.proc.poll() is None, f"the server exited with {self.proc.returncode}:\n{self.stderr()[-3000:]}"
        answer = self.response(self.request(HOVER, hover_params()), timeout)
        assert answer.get("result", "missing") is None, answer  # an untitled buffer: no hover, but an answer
        assert self.proc.poll() is None

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self.response(self.request("shutdown"), 10)
                self.notify("exit")
                self.proc.wait(10)
        except Exception:  # noqa: BLE001 - the case has already failed or passed; just end the process
            pass
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)
            for stream in (self.proc.stdin, self.proc.stdout):
                try:
                    stream.close()  # type: ignore[union-attr]
                except OSError:
                    pass
            self._stderr.close()


@pytest.fixture
def server(tmp_path):
    srv = RawServer(tmp_path)
    try:
        srv.initialize()
        yield srv
    finally:
        srv.close()


pytestmark = pytest.mark.timeout(120)


# -- framing ------------------------------------------------------------------------------------

def test_content_length_too_short(server):
    body = json.dumps(message(HOVER, hover_params(), server.next_id())).encode()
    server.send(frame(body, length=len(body) - 10))
    server.assert_serving()
    assert server.errors(PARSE_ERROR), "the cut-off body is answered as a parse error"


def test_content_length_too_long(server):
    msg_id = server.next_id()
    body = json.dumps(message(HOVER, hover_params(), msg_id)).encode()
    server.send(frame(body, length=len(body) + 25))
    server.assert_serving()
    # The next frame's header marks where the body really ended: the request itself is answered too.
    assert server.response(msg_id).get("result", "missing") is None


def test_missing_content_length(server):
    body = json.dumps(message(HOVER, hover_params(), server.next_id())).encode()
    server.send(b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n" + body)
    server.assert_serving()


@pytest.mark.parametrize("value", ["12abc", "+12", "0x20", "1.5", "", "9" * 5000])
def test_malformed_content_length_value(server, value):
    """Signed, hexadecimal, fractional, empty, and more digits than Python will parse."""
    body = json.dumps(message(HOVER, hover_params(), server.next_id())).encode()
    server.send(f"Content-Length: {value}\r\n\r\n".encode() + body)
    server.assert_serving()


def test_negative_content_length(server):
    body = json.dumps(message(HOVER, hover_params(), server.next_id())).encode()
    server.send(frame(body, length=-1))
    server.assert_serving()


def test_non_numeric_content_length(server):
    body = json.dumps(message(HOVER, hover_params(), server.next_id())).encode()
    server.send(b"Content-Length: twelve\r\n\r\n" + body)
    server.assert_serving()


def test_lowercase_header_is_accepted(server):
    """Header names are case-insensitive (as in HTTP): the frame is read, the request answered."""
    msg_id = server.next_id()
    server.send(frame(message(HOVER, hover_params(), msg_id), header="content-length"))
    assert server.response(msg_id).get("result", "missing") is None
    server.assert_serving()


def test_lf_only_line_endings_are_accepted(server):
    msg_id = server.next_id()
    server.send(frame(message(HOVER, hover_params(), msg_id), eol=b"\n"))
    assert server.response(msg_id).get("result", "missing") is None
    server.assert_serving()


def test_huge_content_length_is_refused_without_allocating(server):
    body = json.dumps(message(HOVER, hover_params(), server.next_id())).encode()
    server.send(frame(body, length=10**12))
    server.assert_serving()
    log = server.stderr()
    assert "MemoryError" not in log
    assert [ln for ln in log.splitlines() if "1000000000000" in ln], log[-3000:]  # one line says why


def test_content_length_just_above_the_limit(server):
    """The documented limit is 64 MiB (``transport.MAX_CONTENT_LENGTH``): one byte more is refused unread."""
    server.send(frame(b"{}", length=64 * 2**20 + 1))
    server.assert_serving()
    assert "67108865" in server.stderr()


def test_garbage_glued_to_the_next_header(server):
    """A stretch of bytes that is no frame at all, with no line break before the next header."""
    server.send(bytes(random.Random(7).randrange(256) for _ in range(20000)).replace(b"\n", b" "))
    server.assert_serving()


# -- messages -------------------------------------------------------------------------------------

def invalid_params(server: RawServer, method: str, params: Any) -> dict:
    msg_id = server.next_id()
    server.send(frame(message(method, params, msg_id) if params is not None
                      else {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": None}))
    answer = server.response(msg_id)
    assert (answer.get("error") or {}).get("code") == INVALID_PARAMS, answer
    server.assert_serving()
    return answer


def test_hover_at_line_minus_one(server):
    invalid_params(server, HOVER, hover_params(line=-1))


def test_hover_at_line_two_to_the_31(server):
    answer = invalid_params(server, HOVER, hover_params(line=2**31))
    assert "position" in answer["error"]["message"]  # the message names what is wrong


def test_hover_with_null_params(server):
    invalid_params(server, HOVER, None)


def test_code_action_range_with_a_string_line(server):
    invalid_params(server, "textDocument/codeAction", {
        "textDocument": {"uri": UNTITLED},
        "range": {"start": {"line": "3", "character": 0}, "end": {"line": 3, "character": 0}},
        "context": {"diagnostics": []}})


def test_execute_command_with_list_params(server):
    invalid_params(server, "workspace/executeCommand", [])


def test_unknown_method(server):
    msg_id = server.next_id()
    server.send(frame(message("frognano/noSuchThing", {"x": 1}, msg_id)))
    assert server.response(msg_id)["error"]["code"] == METHOD_NOT_FOUND
    server.assert_serving()


def test_notification_method_sent_as_a_request(server):
    """``textDocument/didOpen`` with an id: pygls would run it as a notification and never answer."""
    msg_id = server.next_id()
    server.send(frame(message("textDocument/didOpen", {"textDocument": {
        "uri": UNTITLED, "languageId": "python", "version": 1, "text": ""}}, msg_id)))
    assert server.response(msg_id)["error"]["code"] == METHOD_NOT_FOUND
    server.assert_serving()


def test_invalid_json(server):
    server.send(frame(b'{"jsonrpc": "2.0", "id": 7, "method": '))
    server.assert_serving()
    (error,) = server.errors(PARSE_ERROR)
    assert "id" in error and error["id"] is None


@pytest.mark.parametrize("bad_id", [None, 1.5, True, [1], {"a": 1}])
def test_request_with_an_invalid_id(server, bad_id):
    server.send(frame({"jsonrpc": "2.0", "id": bad_id, "method": HOVER, "params": hover_params()}))
    server.assert_serving()
    (error,) = server.errors(INVALID_REQUEST)
    assert "id" in error and error["id"] is None


def test_notifications_are_never_answered(server):
    before = len(server.received)
    server.send(frame(message("textDocument/didOpen", {"textDocument": {"uri": 5}})))  # ill-typed notification
    server.send(frame(message("frognano/unknownNotification", {"x": 1})))
    server.send(frame(message(HOVER, hover_params())))  # a request method without an id
    server.assert_serving()
    extra = [m for m in server.received[before:] if "method" not in m]
    assert len(extra) == 1, extra  # only the hover that assert_serving sent


def test_requests_after_shutdown_are_answered(server):
    assert "result" in server.response(server.request("shutdown"))
    answer = server.response(server.request(HOVER, hover_params()))
    assert answer["error"]["code"] == INVALID_REQUEST
    assert server.proc.poll() is None


def test_deeply_nested_json(server):
    server.send(frame(b"[" * 100000 + b"]" * 100000))
    server.assert_serving()
    assert server.errors(PARSE_ERROR)


# -- the fuzz ---------------------------------------------------------------------------------------

FUZZ_SEED = 9
FUZZ_MESSAGES = 10_000
REQUEST_METHODS = [HOVER, HOVER, "textDocument/codeAction", "textDocument/codeAction", "workspace/executeCommand",
                   "workspace/executeCommand", "textDocument/completion", "textDocument/definition",
                   "initialize", "textDocument/didOpen", "exit", "$/cancelRequest", "frognano/status", "", "x" * 300]
NOTIFICATION_METHODS = ["textDocument/didOpen", "textDocument/didChange", "textDocument/didSave",
                        "textDocument/didClose", "workspace/didChangeConfiguration",
                        "workspace/didChangeWatchedFiles", "workspace/didChangeWorkspaceFolders",
                        "$/cancelRequest", "$/setTrace", "window/workDoneProgress/cancel", "initialized",
                        "$/progress", "frognano/unknown", HOVER]  # never "exit": it ends the server, as it should
COMMANDS = ["frognano.runTests", "frognano.fix", "frognano.applyFix", "frognano.toggleAutoFix",
            "frognano.showDiagnosis", "frognano.showEpisode", "no.such.command"]
STRINGS = ["", "x", "é", "😀", "\ud800", "\x00", "a\nb", '"', "\\", "Content-Length: 5\r\n\r\n", "null", "0",
           "file:", "untitled:", "frognano.fix", "\u2028"]
INTS = [0, 1, -1, 7, 2**31 - 1, 2**31, -2**31, 2**53 + 1, 10**30]


class Fuzzer:
    """Seeded messages: well-typed templates, mutated templates, random JSON, broken frames.

    Every frame is recorded with what the server owes it: ``must`` ids (a well-framed request
    with a valid id: exactly one answer), ``maybe`` ids (a request inside a deliberately broken
    frame: at most one answer).
    """

    def __init__(self, seed: int, uris: list[str]) -> None:
        self.rng = random.Random(seed)
        self.uris = uris
        self.must: list[Any] = []
        self.maybe: list[Any] = []
        self.n = 0
        self.kinds: dict[str, int] = {}

    # -- values -------------------------------------------------------------------------------
    def scalar(self) -> Any:
        r = self.rng
        return r.choice([None, True, False, r.choice(INTS), r.randrange(-100, 100), r.choice([1.5, -0.0, 1e308, 3.0]),
                         r.choice(STRINGS), "".join(chr(r.randrange(32, 0x2FF)) for _ in range(r.randrange(12)))])

    def value(self, depth: int = 0) -> Any:
        r = self.rng.random()
        if depth > 3 or r < 0.5:
            return self.scalar()
        if r < 0.75:
            return [self.value(depth + 1) for _ in range(self.rng.randrange(4))]
        keys = ["uri", "line", "character", "textDocument", "position", "range", "start", "end", "command",
                "arguments", "id", "text", "version", "settings", "changes", "event", "value", "token", "x"]
        return {self.rng.choice(keys): self.value(depth + 1) for _ in range(self.rng.randrange(4))}

    def new_id(self) -> Any:
        self.n += 1
        n = self.n  # unique, and never one of RawServer's own small ids
        return self.rng.choice([100_000 + n, -n, 2**53 + n, 10**30 + n, f"id-{n}", f"é{n}😀", f"{n}", f" {n}\n"])

    def bad_id(self) -> Any:
        return self.rng.choice([None, 1.5, True, False, [self.n], {"id": self.n}, 2.0])

    # -- params -------------------------------------------------------------------------------
    def template(self, method: str) -> Any:
        r = self.rng
        uri = r.choice(self.uris)

        def pos() -> dict:
            return {"line": r.randrange(60), "character": r.randrange(80)}

        table = {
            HOVER: lambda: {"textDocument": {"uri": uri}, "position": pos()},
            "textDocument/codeAction": lambda: {"textDocument": {"uri": uri}, "range": {"start": pos(), "end": pos()},
                                                "context": {"diagnostics": []}},
            "workspace/executeCommand": lambda: {"command": r.choice(COMMANDS),
                                                 "arguments": r.choice([[], [uri], [{"uri": uri}], [r.choice(STRINGS)]])},
            "textDocument/didOpen": lambda: {"textDocument": {"uri": uri, "languageId": "python",
                                                              "version": r.randrange(100), "text": "x = 1\n"}},
            "textDocument/didChange": lambda: {"textDocument": {"uri": uri, "version": r.randrange(100)},
                                               "contentChanges": [{"text": "y = 2\n"},
                                                                  {"range": {"start": pos(), "end": pos()}, "text": "z"}]},
            "textDocument/didSave": lambda: {"textDocument": {"uri": uri}},
            "textDocument/didClose": lambda: {"textDocument": {"uri": uri}},
            "workspace/didChangeConfiguration": lambda: {"settings": {"frognano": {"debounceMs": r.randrange(-5, 100)}}},
            "workspace/didChangeWatchedFiles": lambda: {"changes": [{"uri": uri, "type": r.randrange(4)}]},
            "workspace/didChangeWorkspaceFolders": lambda: {"event": {"added": [{"uri": "untitled:folder", "name": "f"}],
                                                                      "removed": []}},
            "$/cancelRequest": lambda: {"id": r.randrange(self.n + 1)},
            "$/setTrace": lambda: {"value": r.choice(["off", "messages", "verbose", "loud"])},
            "window/workDoneProgress/cancel": lambda: {"token": r.choice(["t", 1])},
            "initialized": lambda: {},
            "$/progress": lambda: {"token": "t", "value": {"kind": "end"}},
        }
        if method == "initialize":  # a valid one would re-initialise the server: only ill-typed shapes
            return r.choice([[], None, 1, "x", [{"capabilities": {}}]])
        return table[method]() if method in table else self.value()

    def mutate(self, params: Any) -> Any:
        """Replace one nested value with a random one, or drop a key."""
        if not isinstance(params, (dict, list)) or not params:
            return self.value()
        node = params
        while True:
            keys = list(node.keys()) if isinstance(node, dict) else list(range(len(node)))
            key = self.rng.choice(keys)
            child = node[key]
            if isinstance(child, (dict, list)) and child and self.rng.random() < 0.6:
                node = child
                continue
            if isinstance(node, dict) and self.rng.random() < 0.2:
                del node[key]
            else:
                node[key] = self.value()
            return params

    def params(self, method: str) -> Any:
        p = self.template(method)
        roll = self.rng.random()
        if roll < 0.55:
            p = self.mutate(p)
        elif roll < 0.7:
            p = self.value()
        return p

    # -- frames -------------------------------------------------------------------------------
    def request_body(self) -> tuple[dict, Any]:
        method = self.rng.choice(REQUEST_METHODS)
        msg_id = self.new_id()
        msg = {"jsonrpc": "2.0", "id": msg_id, "method": method}
        p = self.params(method)
        if p is not None or self.rng.random() < 0.3:
            msg["params"] = p
        return msg, msg_id

    def next_frame(self) -> bytes:
        r = self.rng
        roll = r.random()
        if roll < 0.35:
            kind = "request"
            msg, msg_id = self.request_body()
            if r.random() < 0.05:  # a request that is not JSON-RPC 2.0 still has a valid id to answer
                msg["jsonrpc"] = r.choice(["1.0", 2, None])
            self.must.append(msg_id)
            data = frame(msg)
        elif roll < 0.6:
            kind = "notification"
            method = r.choice(NOTIFICATION_METHODS)
            data = frame({"jsonrpc": "2.0", "method": method, "params": self.params(method)})
        elif roll < 0.65:
            kind = "bad id"
            msg, _ = self.request_body()
            msg["id"] = self.bad_id()
            data = frame(msg)
        elif roll < 0.73:
            kind = "not JSON"
            msg, _ = self.request_body()
            text = json.dumps(msg).encode()
            data = frame(r.choice([text[: r.randrange(len(text))], bytes(r.randrange(256) for _ in range(r.randrange(1, 300))),
                                   b"\xff\xfe" + text, text + b"}", b"{'single': 'quotes'}"]))
        elif roll < 0.76:
            kind = "not an object"
            msg, _ = self.request_body()
            data = frame(r.choice([[msg, msg], [], 1, "text", None, [1, 2]]))
        elif roll < 0.78:
            kind = "response"
            data = frame(r.choice([{"jsonrpc": "2.0", "id": self.n, "result": self.value()},
                                   {"jsonrpc": "2.0", "id": self.n, "error": self.value()},
                                   {"jsonrpc": "2.0", "id": f"frognano-{self.n}", "error": {"code": -1, "message": "m"}}]))
        else:
            kind, data = self.broken_frame()
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        return data

    def broken_frame(self) -> tuple[str, bytes]:
        r = self.rng
        msg, msg_id = self.request_body()
        body = json.dumps(msg).encode()
        kind = r.choice(["short", "long", "missing", "negative", "non-numeric", "huge", "junk", "long line",
                         "junk headers", "lowercase", "lf only", "upper case", "extra header", "no space"])
        if kind in ("lowercase", "lf only", "upper case", "extra header", "no space"):  # legal: must be answered
            self.must.append(msg_id)
            return kind, {"lowercase": frame(body, header="content-length"),
                          "upper case": frame(body, header="CONTENT-LENGTH"),
                          "lf only": frame(body, eol=b"\n"),
                          "extra header": b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n" + frame(body),
                          "no space": b"Content-Length:%d\r\n\r\n" % len(body) + body}[kind]
        self.maybe.append(msg_id)
        return kind, {
            "short": lambda: frame(body, length=r.randrange(len(body))),
            "long": lambda: frame(body, length=len(body) + r.randrange(1, 400)),
            "missing": lambda: b"Content-Type: application/vscode-jsonrpc\r\n\r\n" + body,
            "negative": lambda: frame(body, length=-r.randrange(1, 10**6)),
            "non-numeric": lambda: f"Content-Length: {r.choice(['abc', '1e3', '0x10', '', ' ', '١٢'])}\r\n\r\n".encode() + body,
            "huge": lambda: frame(body, length=r.choice([10**12, 2**64, 64 * 2**20 + 1, 10**40])),
            "junk": lambda: bytes(r.randrange(256) for _ in range(r.randrange(1, 2000))),
            "long line": lambda: b"A" * r.randrange(9000, 20000),
            "junk headers": lambda: b"".join(f"X-{r.randrange(99)}: {r.random()}\r\n".encode()
                                             for _ in range(r.randrange(1, 5))) + b"\r\n" + body,
        }[kind]()


def key(msg_id: Any) -> tuple[str, str]:
    return type(msg_id).__name__, repr(msg_id)


def answers(server: RawServer) -> Counter:
    """How many answers each id got (ids as ``key`` spells them)."""
    with server._cond:
        return Counter(key(m.get("id")) for m in server.received if "method" not in m)


def test_fuzz_ten_thousand_messages(tmp_path):
    from frognano.server.app import PROJECT_MARKERS

    # A file: URI is only safe if no folder above it looks like a project (the server would run its tests).
    uris = [UNTITLED, "untitled:fuzz.py", "git:/fuzz.py?ref=HEAD"]
    if not any((Path("/") / m).exists() for m in PROJECT_MARKERS):
        uris.append("file:///frognano-fuzz-nowhere/fuzz.py")
    fuzz = Fuzzer(FUZZ_SEED, uris)
    frames = [fuzz.next_frame() for _ in range(FUZZ_MESSAGES)]

    server = RawServer(tmp_path)
    try:
        server.initialize()
        start = time.monotonic()
        for i in range(0, len(frames), 50):
            server.send(b"".join(frames[i:i + 50]))
            if i % 1000 == 0:
                assert server.proc.poll() is None, f"the server exited after {i} messages:\n{server.stderr()[-3000:]}"
        final = server.request(HOVER, hover_params())
        answer = server.response(final, timeout=60)
        assert answer.get("result", "missing") is None, answer
        # Everything sent before the final request was read before it; async handlers may still finish.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            count = answers(server)
            if all(count[key(i)] for i in fuzz.must):
                break
            time.sleep(0.2)
        seconds = time.monotonic() - start
        assert server.proc.poll() is None

        count = answers(server)
        unanswered = [i for i in fuzz.must if not count[key(i)]]
        twice = [i for i in fuzz.must + fuzz.maybe if count[key(i)] > 1]
        known = {key(i) for i in fuzz.must + fuzz.maybe + [final, 1]}
        strangers = [k for k in count if k != key(None) and k not in known]
        null_ids = count[key(None)]
        maybe_answered = sum(1 for i in fuzz.maybe if count[key(i)])
        print(f"\nfuzz: {FUZZ_MESSAGES} messages {fuzz.kinds}; {len(fuzz.must)} requests owed an answer, "
              f"{len(fuzz.must) - len(unanswered)} answered; {maybe_answered}/{len(fuzz.maybe)} requests in broken "
              f"frames answered; {null_ids} answers with id null; {seconds:.1f} s")
        assert not unanswered, f"{len(unanswered)} requests never answered, first: {unanswered[:5]}"
        assert not twice, f"answered twice: {twice[:5]}"
        assert not strangers, f"answers to ids nobody sent: {strangers[:3]}"
        with server._cond:
            assert all("error" in m for m in server.received if "method" not in m and m.get("id") is None)
    finally:
        server.close()
