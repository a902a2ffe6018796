"""The frame decoder of ``frognano serve`` on its own: bytes in, bodies out (no process)."""

from __future__ import annotations

import json
import logging

from frognano.server.transport import MAX_HEADER_LINE, FrameDecoder


def body(n: int, text: str = "") -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": n, "method": "textDocument/hover", "params": {"text": text}}).encode()


def frame(data: bytes, length: int | None = None, header: bytes = b"Content-Length", eol: bytes = b"\r\n") -> bytes:
    return header + b": %d" % (len(data) if length is None else length) + eol + eol + data


def test_frames_split_anywhere_come_out_whole():
    bodies = [body(1), body(2, "é" * 50), body(3)]
    stream = b"".join(frame(b) for b in bodies)
    for cut in range(len(stream) + 1):
        decoder = FrameDecoder()
        assert decoder.feed(stream[:cut]) + decoder.feed(stream[cut:]) == bodies, cut


def test_header_case_line_ends_and_other_headers():
    decoder = FrameDecoder()
    stream = (frame(body(1), header=b"content-length") + frame(body(2), eol=b"\n")
              + b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n" + frame(body(3))
              + b"Content-Length:%d\r\n\r\n" % len(body(4)) + body(4))
    assert decoder.feed(stream) == [body(1), body(2), body(3), body(4)]
    assert decoder.dropped == 0


def test_a_body_that_mentions_a_header_is_not_cut():
    """In JSON a line break inside a string is escaped, so this is text, not a header."""
    inner = body(1, "Content-Length: 5\r\n\r\nabcde")
    assert b"\r\n" not in inner
    assert FrameDecoder().feed(frame(inner) + frame(body(2))) == [inner, body(2)]


def test_too_long_a_length_ends_at_the_next_header():
    decoder = FrameDecoder()
    assert decoder.feed(frame(body(1), length=len(body(1)) + 40) + frame(body(2))) == [body(1), body(2)]


def test_too_short_a_length_resynchronises():
    decoder = FrameDecoder()
    out = decoder.feed(frame(body(1), length=10) + frame(body(2)))
    assert out == [body(1)[:10], body(2)]


def test_bad_lengths_skip_to_the_next_header(caplog):
    for bad in (b"Content-Length: -4", b"Content-Length: x", b"Content-Length: 1e3", b"Content-Length: ",
                b"Content-Length: 1000000000000", b"Content-Length: " + b"9" * 5000, b"Content-Type: a"):
        decoder = FrameDecoder()
        with caplog.at_level(logging.WARNING, logger="frognano.server.transport"):
            caplog.clear()
            assert decoder.feed(bad + b"\r\n\r\n" + body(1) + frame(body(2))) == [body(2)], bad
        assert len(caplog.records) == 1, (bad, caplog.text)  # one line per bad stretch
        assert len(decoder._buf) == 0


def test_a_huge_length_is_never_allocated():
    decoder = FrameDecoder(max_length=1000)
    assert decoder.feed(frame(b"x" * 1001) + frame(body(1))) == [body(1)]
    assert decoder.feed(frame(b"x" * 1000)) == [b"x" * 1000]


def test_garbage_without_line_breaks_stays_bounded():
    decoder = FrameDecoder()
    for _ in range(100):
        assert decoder.feed(b"A" * 65536) == []
        assert len(decoder._buf) <= MAX_HEADER_LINE + 65536
    assert decoder.feed(frame(body(1))) == [body(1)]
    assert decoder.dropped > 6_000_000


# -- the protocol, in process -----------------------------------------------------------------------

class Wire:
    def __init__(self) -> None:
        self.out = bytearray()

    def write(self, data: bytes) -> None:
        self.out += data

    def close(self) -> None:
        pass

    def messages(self) -> list[dict]:
        decoder = FrameDecoder()
        return [json.loads(b) for b in decoder.feed(bytes(self.out))]


def protocol_and_wire():
    from frognano.server.app import create_server

    server = create_server()
    wire = Wire()
    server.protocol.set_writer(wire)
    return server.protocol, wire


def test_strict_params_keep_enums():
    from lsprotocol import types

    protocol, _ = protocol_and_wire()
    span = {"start": {"line": 1, "character": 0}, "end": {"line": 1, "character": 4}}
    params = protocol._converter.structure(
        {"textDocument": {"uri": "untitled:x"}, "range": span,
         "context": {"diagnostics": [{"range": span, "message": "m", "severity": 1}], "triggerKind": 1}},
        types.CodeActionParams)
    assert params.context.diagnostics[0].severity is types.DiagnosticSeverity.Error
    assert protocol._converter.unstructure(params)["context"]["diagnostics"][0]["severity"] == 1
    content = protocol._converter.structure({"kind": "markdown", "value": "v"}, types.MarkupContent)
    assert content.kind is types.MarkupKind.Markdown


def test_errors_for_what_pygls_would_drop():
    protocol, wire = protocol_and_wire()
    protocol.receive(b'{"jsonrpc": "2.0", "id": 1, "method"')
    protocol.receive(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "textDocument/hover", "params": {
        "textDocument": {"uri": "untitled:x"}, "position": {"line": True, "character": 0}}}).encode())
    protocol.receive(json.dumps({"jsonrpc": "2.0", "id": [3], "method": "textDocument/hover"}).encode())
    protocol.receive(json.dumps({"jsonrpc": "2.0", "method": "textDocument/hover", "params": 5}).encode())
    answers = [(m["id"], m["error"]["code"]) for m in wire.messages()]
    assert answers == [(None, -32700), (2, -32602), (None, -32600)]  # the notification: not answered
    assert "position.line" in wire.messages()[1]["error"]["message"]


def test_an_answer_that_cannot_be_written_becomes_an_error():
    protocol, wire = protocol_and_wire()
    protocol._send_response(7, result=object())
    (answer,) = wire.messages()
    assert answer["id"] == 7 and answer["error"]["code"] == -32603
