"""The wire of ``frognano serve``: frames read from stdin, every message checked before pygls
dispatches it, and exactly one answer for every request, whatever the client sends.

Why not pygls' own loop (``pygls.io_.run_async``, pygls 2.1): it accepts a header only when it
is exactly ``Content-Length: N\\r\\n`` and then reads ``N`` bytes blindly, so one frame with a
wrong, missing or unparsable length leaves every later header glued to the tail of a body and
the server never hears another message; ``Content-Length: 1000000000000`` asks ``read()`` for a
terabyte (MemoryError, the process dies).  And it deserialises inside ``json.loads`` (the
protocol's ``structure_message`` as object hook), so ill-typed params raise before the request
reaches the dispatcher: the error is logged and the editor waits forever for the answer.

Here:

* ``FrameDecoder`` (no I/O, one idea: bytes in, bodies out) reads header names case-insensitively,
  accepts LF-only line ends, refuses a declared length above ``MAX_CONTENT_LENGTH`` without
  allocating it, and after anything it cannot read skips to the next ``Content-Length`` header,
  logging one line per bad stretch.
* ``FrogNanoProtocol`` parses each body itself and answers what pygls would drop: invalid JSON
  (-32700, id null), a message that is not a request object (-32600), ill-typed params (-32602,
  with where and why), a notification's method sent with an id (-32601), a request after
  ``shutdown`` (-32600).  Notifications are never answered; their problems are logged.
* ``shutdown`` answers every request still in flight (-32800, pygls' own loop over them broke
  when a cancelled handler answered during it), and ``exit`` ends the process with LSP's code,
  0 after ``shutdown`` and 1 without, within a second or so (``FrogNanoServer.shutdown``).
* ``start_io`` is pygls' ``start_io`` with this reader in place of its own.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import re
import sys
import threading
from typing import TYPE_CHECKING, Any, BinaryIO, Optional, Union

import cattrs
from cattrs.v import format_exception
from lsprotocol import types
from pygls.exceptions import JsonRpcInternalError
from pygls.io_ import StdoutWriter
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method
from pygls.protocol.json_rpc import JsonRPCNotification, JsonRPCRequestMessage, JsonRPCResponseMessage, RPCRequest

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer

log = logging.getLogger(__name__)

MAX_CONTENT_LENGTH = 64 * 2**20
"""The largest body read (64 MiB): a didOpen of a 60 MB file still fits; a larger declared
length is refused before any of it is read, and the frame skipped."""
MAX_HEADER_LINE = 8192  # a header line longer than this is garbage
CHUNK = 65536  # bytes asked of stdin per read
_READ_AHEAD = 4  # chunks read before the loop has handled them

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603

_TAIL = 64  # bytes kept when garbage is dropped: a header may begin in them
_HEADER = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+)[ \t]*:[ \t]*(.*?)[ \t]*")  # one line, its end stripped
_LENGTH_NAME = re.compile(rb"content-length[ \t]*:", re.IGNORECASE)
# A whole Content-Length line.  It can never occur inside a JSON text (a raw line break is not
# allowed in a JSON string, and letters outside strings only spell true/false/null), so one found
# before a body's declared end means the length was wrong and the next frame starts there.
_LENGTH_LINE = re.compile(rb"content-length[ \t]*:[ \t]*[0-9]{1,20}[ \t]*\r?\n", re.IGNORECASE)


class FrameDecoder:
    """LSP base-protocol frames from a byte stream: ``feed(bytes)`` returns the complete bodies."""

    def __init__(self, max_length: int = MAX_CONTENT_LENGTH) -> None:
        self.max_length = max_length
        self.dropped = 0  # bytes skipped as garbage, for the log and the tests
        self._buf = bytearray()
        self._in_headers = False  # a header line of the current block was read
        self._declared: int | None = None  # its Content-Length
        self._length: int | None = None  # reading a body of this many bytes
        self._scanned = 0  # body bytes already searched for a header
        self._lost = False  # a problem was logged and no whole frame has been read since

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        bodies: list[bytes] = []
        while True:
            if self._length is not None:
                body = self._body()
                if body is None:
                    break
                bodies.append(body)
            elif not self._header_line():
                break
        return bodies

    def end(self) -> None:
        """The input ended: say so if it ended inside a frame."""
        if self._length is not None or self._buf.strip():
            log.info("the input ended inside a frame (%d bytes unread)", len(self._buf))

    # -- headers --------------------------------------------------------------------------------
    def _header_line(self) -> bool:
        """Consume one header line; False when a whole line has not arrived yet."""
        buf = self._buf
        end = buf.find(b"\n")
        if end < 0:
            if len(buf) > MAX_HEADER_LINE:
                self._problem(f"a line of more than {MAX_HEADER_LINE} bytes without a header")
                self._drop(len(buf) - _TAIL)
            return False
        line = bytes(buf[: end + 1])
        start = _last_length_name(line)
        if start > 0:  # "...}Content-Length: 80": the tail of something else, then a header
            self._problem("bytes that belong to no frame")
            self._drop(start)
            return True
        del buf[: end + 1]
        text = line.rstrip(b"\r\n")  # CRLF or a bare LF: both end a line here
        if not text.strip():
            self._end_of_headers()
            return True
        match = _HEADER.fullmatch(text)
        if match is None:
            self._problem(f"not a header line: {_show(text)}")
            self.dropped += len(line)
            self._reset()
            return True
        self._in_headers = True
        if match[1].lower() == b"content-length":  # header names are case-insensitive
            self._content_length(match[2])
        return True

    def _content_length(self, value: bytes) -> None:
        if not value.isdigit():  # bytes.isdigit is ASCII digits only: no sign, no spaces, no "1e3"
            self._problem(f"Content-Length {_show(value)} is not a byte count")
            self._reset()
        elif len(value) > 20 or int(value) > self.max_length:
            self._problem(f"Content-Length {_show(value)} is above the limit of {self.max_length} bytes; "
                          "the frame is skipped unread")
            self._reset()
        else:
            if self._declared is not None and self._declared != int(value):
                self._problem("two different Content-Length headers; the last one counts")
            self._declared = int(value)

    def _end_of_headers(self) -> None:
        if not self._in_headers:
            return  # a stray line break between frames
        declared = self._declared
        self._reset()
        if declared is None:
            self._problem("a header block without Content-Length")
        else:
            self._length, self._scanned = declared, 0

    # -- bodies ---------------------------------------------------------------------------------
    def _body(self) -> bytes | None:
        buf, length = self._buf, self._length
        assert length is not None
        found = _LENGTH_LINE.search(buf, max(0, self._scanned - _TAIL), min(len(buf), length + _TAIL))
        if found is not None and found.start() < length:
            self._problem(f"Content-Length {length}, but the next header came after {found.start()} bytes")
            return self._take(found.start())
        if len(buf) < length:
            self._scanned = len(buf)
            return None
        self._lost = False  # back in step: the next problem is logged again
        return self._take(length)

    def _take(self, n: int) -> bytes:
        body = bytes(self._buf[:n])
        del self._buf[:n]
        self._length = None
        return body

    # -- problems -------------------------------------------------------------------------------
    def _problem(self, reason: str) -> None:
        if not self._lost:  # one line per bad stretch, not one per garbage line
            log.warning("unreadable LSP input, skipping to the next header: %s", reason)
        self._lost = True

    def _drop(self, n: int) -> None:
        del self._buf[:n]
        self.dropped += n
        self._reset()

    def _reset(self) -> None:
        self._in_headers, self._declared = False, None


def _last_length_name(line: bytes) -> int:
    """Where the last ``Content-Length:`` in ``line`` starts; -1 when there is none."""
    start = -1
    for match in _LENGTH_NAME.finditer(line):
        start = match.start()
    return start


def _show(value: bytes) -> str:
    return repr(value[:40])[2:-1] + ("..." if len(value) > 40 else "")


# -- messages ---------------------------------------------------------------------------------------

def strict_scalars(converter: cattrs.Converter) -> None:
    """Refuse what cattrs would coerce: ``"3"`` or ``true`` as a line number, ``5`` as a URI, and
    what lsprotocol passes through unchecked: a list as a request id or a progress token.

    A whole number written as a float (``3.0``, as some JSON encoders of doubles do) still counts.
    """
    # ``kind(value)`` as cattrs does: ``kind`` may be an int or str enum (DiagnosticSeverity, MarkupKind).
    def integer(value: Any, kind: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                isinstance(value, float) and not value.is_integer()):
            raise TypeError(f"expected an integer, got {_json(value)}")
        return kind(int(value))

    def number(value: Any, kind: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"expected a number, got {_json(value)}")
        return kind(value)

    def string(value: Any, kind: Any) -> str:
        if not isinstance(value, str):
            raise TypeError(f"expected a string, got {_json(value)}")
        return kind(value)

    def boolean(value: Any, _: Any) -> bool:
        if not isinstance(value, bool):
            raise TypeError(f"expected a boolean, got {_json(value)}")
        return value

    def int_or_str(value: Any, _: Any) -> int | str:  # ids and progress tokens, passed through as they came
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise TypeError(f"expected an integer or a string, got {_json(value)}")
        return value

    def optional_int_or_str(value: Any, kind: Any) -> int | str | None:
        return None if value is None else int_or_str(value, kind)

    for kind, hook in ((int, integer), (float, number), (str, string), (bool, boolean), (Union[int, str], int_or_str),
                       (Optional[Union[int, str]], optional_int_or_str)):
        converter.register_structure_hook(kind, hook)


def _json(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (str, int, float, bool, type(None))) else type(value).__name__
    return text if len(text) <= 40 else text[:40] + "..."


def _why(exc: BaseException) -> str:
    """What is wrong with a message, with where: ``invalid value (...) @ $.params.position``."""
    if isinstance(exc, cattrs.BaseValidationError):
        def describe(e: BaseException, kind: Any) -> str:
            if isinstance(e, (TypeError, ValueError)) and str(e):
                return f"invalid value ({e})"
            return format_exception(e, kind)

        lines = cattrs.transform_error(exc, format_exception=describe)
        if lines:
            return "; ".join(lines[:3])[:400]
    return f"{type(exc).__name__}: {exc}"[:400]


class FrogNanoProtocol(LanguageServerProtocol):
    """pygls' language server protocol, fed whole bodies by ``receive``, which checks each
    message before pygls dispatches it and answers every request it cannot dispatch."""

    def __init__(self, server: Any, converter: cattrs.Converter) -> None:
        strict_scalars(converter)
        super().__init__(server, converter)

    def receive(self, body: bytes) -> None:
        """One frame's body."""
        try:
            data = json.loads(body.decode("utf-8"))
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            log.warning("a frame that is not JSON (%d bytes): %s", len(body), exc)
            self.reply_error(None, PARSE_ERROR, f"Parse error: {exc}")
            return
        if not isinstance(data, dict):
            log.warning("a message that is not a JSON object: %s", type(data).__name__)
            self.reply_error(None, INVALID_REQUEST, "Invalid Request: a message is a JSON object (LSP has no batches)")
            return
        try:
            self.receive_message(data)
        except BrokenPipeError:  # the client is gone: let the loop end, as pygls does
            raise
        except Exception as exc:  # noqa: BLE001 - a bug here must not leave a request unanswered
            log.exception("cannot handle a message")
            msg_id = data.get("id")
            if "method" in data and isinstance(msg_id, (int, str)) and not isinstance(msg_id, bool):
                self.reply_error(msg_id, INTERNAL_ERROR, f"Internal error: {type(exc).__name__}: {exc}")

    def receive_message(self, data: dict) -> None:
        msg_id = data.get("id")
        has_id, good_id = "id" in data, isinstance(msg_id, (int, str)) and not isinstance(msg_id, bool)
        if "method" not in data:
            self.receive_response(data, msg_id if good_id else None)
            return
        method = data["method"]
        problem = None
        if has_id and not good_id:
            problem = f"the id must be a string or an integer, not {_json(msg_id)}"
        elif data.get("jsonrpc") != "2.0":
            problem = 'jsonrpc must be "2.0"'
        elif not isinstance(method, str):
            problem = "the method must be a string"
        elif not isinstance(data.get("params"), (dict, list, type(None))):
            problem = "params must be an object or an array"
        if problem is not None:
            if has_id:  # a request: JSON-RPC answers one whose id is unusable with id null
                self.reply_error(msg_id if good_id else None, INVALID_REQUEST, f"Invalid Request: {problem}")
            else:
                log.warning("dropped a notification: %s", problem)
            return
        kind = self.get_message_type(method) or (JsonRPCRequestMessage if has_id else JsonRPCNotification)
        try:
            message = self._converter.structure(data, kind)
        except Exception as exc:  # noqa: BLE001 - cattrs raises many kinds; each is the client's mistake
            why = _why(exc)
            if has_id:
                log.warning("invalid params for %s (request %r): %s", method, msg_id, why)
                self.reply_error(msg_id, INVALID_PARAMS, f"Invalid params for {method}: {why}")
            else:
                log.warning("dropped a %s notification with invalid params: %s", method, why)
            return
        if has_id and not isinstance(message, RPCRequest):
            # lsprotocol types the method as a notification and drops the id: pygls would run it
            # and never answer.
            self.reply_error(msg_id, METHOD_NOT_FOUND, f"Method not found: {method} is a notification, not a request")
            return
        self.handle_message(message)

    def receive_response(self, data: dict, msg_id: int | str | None) -> None:
        """The client's answer to one of the server's requests."""
        if data.get("jsonrpc") != "2.0" or msg_id is None:
            log.warning("dropped a message with neither a method nor a usable id")
            return
        kind = types.ResponseErrorMessage if "error" in data else (
            self._result_types.pop(msg_id, None) or JsonRPCResponseMessage)
        try:
            message = self._converter.structure(data, kind)
        except Exception as exc:  # noqa: BLE001
            why = _why(exc)
            log.warning("a malformed answer to request %r: %s", msg_id, why)
            future = self._request_futures.pop(msg_id, None)
            if future is not None and not future.done():  # whoever awaits it must not wait forever
                future.set_exception(JsonRpcInternalError(f"malformed response from the client: {why}"))
            return
        self.handle_message(message)

    @lsp_method(types.SHUTDOWN)
    def lsp_shutdown(self, *args: Any) -> Any:
        """pygls' shutdown, answering every request still in flight.

        pygls cancels the other requests while iterating ``_request_futures``; cancelling a
        generator handler's future (executeCommand's) runs its done callback at once, which
        sends the -32800 answer and removes the entry: "dictionary changed size during
        iteration" became the shutdown's own answer (-32603) and the requests after it in the
        dict were never answered.  Here the futures are cancelled from a copy, and the id of
        the shutdown itself is taken before the server's handler runs (the context it resumes
        in is another request's).
        """
        current_id = self.msg_id
        if (user_handler := self.fm.features.get(types.SHUTDOWN)) is not None:
            yield user_handler, args, None
        self._cancel_in_flight(current_id)
        self._shutdown = True
        return None

    @lsp_method(types.EXIT)
    def lsp_exit(self, *args: Any) -> Any:
        """pygls' exit (the process ends with 0 after ``shutdown``, 1 without), with the requests
        still in flight cancelled first: each is answered -32800 while the output is open, and
        the loop's teardown finds their handlers' futures done instead of logging tracebacks."""
        if (user_handler := self.fm.features.get(types.EXIT)) is not None:
            yield user_handler, args, None
        self._cancel_in_flight(None)
        returncode = 0 if self._shutdown else 1
        closing = self.writer.close() if self.writer is not None else None
        if inspect.isawaitable(closing):  # a websocket: exit once it has closed
            asyncio.ensure_future(closing).add_done_callback(lambda _: sys.exit(returncode))
            return None
        sys.exit(returncode)

    def _cancel_in_flight(self, keep: Any) -> None:
        """Cancel every pending request but ``keep``, the client's and the server's own, from a
        copy: a cancelled handler's callback answers it and removes it from the dict."""
        for msg_id, future in list(self._request_futures.items()):
            if msg_id != keep and not future.done():
                future.cancel()  # the client gets -32800 RequestCancelled for each of its own

    def handle_message(self, message: Any) -> None:
        # pygls drops requests after shutdown without an answer; LSP says: InvalidRequest.
        if self._shutdown and isinstance(message, RPCRequest) and message.method != types.EXIT:
            self.reply_error(message.id, INVALID_REQUEST, "Invalid Request: the server is shutting down")
            return
        super().handle_message(message)

    def _send_data(self, data: Any) -> None:
        if getattr(self.writer, "closed", False):  # after exit: nobody reads any more
            log.debug("not sent, the output is closed: %s", getattr(data, "method", None) or getattr(data, "id", data))
            return
        # pygls logs a result it cannot serialise and sends nothing: the request would hang.
        # Answers are checked first (the same json.dumps pygls makes) and replaced by an error.
        if hasattr(data, "result") and getattr(data, "id", None) is not None:
            try:
                json.dumps(data, default=self._serialize_message)
            except Exception as exc:  # noqa: BLE001
                log.exception("cannot serialise the answer to request %r", data.id)
                data = {"jsonrpc": "2.0", "id": data.id,
                        "error": {"code": INTERNAL_ERROR, "message": f"Internal error: {type(exc).__name__}: {exc}"}}
        super()._send_data(data)

    def reply_error(self, msg_id: int | str | None, code: int, message: str) -> None:
        # A plain dict: lsprotocol's converter would leave out ``"id": null``, which JSON-RPC requires.
        self._send_data({"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message[:1000]}})


# -- the loop ---------------------------------------------------------------------------------------

class ClosingStdoutWriter(StdoutWriter):
    """pygls' stdout writer, which says when it is closed (``exit`` closes it).  What the server
    would send after that is dropped: pygls reports a failed write by sending a log message,
    which failed in turn, a recursion whose tracebacks took seconds to format on the way out."""

    closed = False

    def close(self) -> None:
        self.closed = True
        super().close()


async def read_frames(stop: threading.Event, stdin: BinaryIO, protocol: FrogNanoProtocol,
                      max_length: int = MAX_CONTENT_LENGTH) -> None:
    """Read ``stdin`` until it ends (or ``stop``), handing each body to ``protocol.receive``.

    The reads happen on a daemon thread of their own, a few chunks ahead at most: a read that
    blocks on a client which keeps its end open never holds up the exit (a thread of pygls'
    pool would: its shutdown, and the interpreter's exit, wait for every pool thread).
    """
    loop = asyncio.get_running_loop()
    read = _reader(stdin)
    chunks: asyncio.Queue[bytes] = asyncio.Queue()
    room = threading.Semaphore(_READ_AHEAD)

    def pump() -> None:
        while True:
            room.acquire()
            try:
                data = read(CHUNK)
            except (OSError, ValueError):  # closed under us: the input has ended
                data = b""
            try:
                loop.call_soon_threadsafe(chunks.put_nowait, data)
            except RuntimeError:  # the loop is closed: the server is exiting
                return
            if not data:
                return

    threading.Thread(target=pump, name="frognano-stdin", daemon=True).start()
    decoder = FrameDecoder(max_length)
    while not stop.is_set():
        data = await chunks.get()
        room.release()
        if not data:
            break
        for body in decoder.feed(data):
            protocol.receive(body)
    decoder.end()


def _reader(stdin: BinaryIO) -> Any:
    """``read(n)``: whatever has arrived, up to ``n`` bytes.  On a real file descriptor, straight
    from it: a daemon thread blocked inside a buffered stream's read holds the stream's lock,
    and the interpreter aborts when it finds that lock held at exit."""
    try:
        fd = stdin.fileno()
    except (AttributeError, OSError, ValueError):  # io.BytesIO and the like
        return getattr(stdin, "read1", stdin.read)
    return lambda n: os.read(fd, n)


def start_io(server: LanguageServer, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None,
             max_length: int = MAX_CONTENT_LENGTH) -> None:
    """Serve over stdio until the input ends or the client says ``exit`` (pygls' ``start_io``
    with ``read_frames`` as the reader).  ``exit`` ends the process with LSP's code: 0 after
    ``shutdown``, 1 without (pygls raises that SystemExit inside the loop; it is passed on once
    the server has stopped, never swallowed)."""
    server._stop_event = stop = threading.Event()  # pygls' shutdown() sets it to end the loop
    server.protocol.set_writer(ClosingStdoutWriter(stdout or sys.stdout.buffer))
    protocol = server.protocol
    assert isinstance(protocol, FrogNanoProtocol), "create the server with protocol_cls=FrogNanoProtocol"
    code: int | str | None = 0
    try:
        asyncio.run(read_frames(stop, stdin or sys.stdin.buffer, protocol, max_length))
    except BrokenPipeError:
        log.error("the client closed the connection; shutting down")
    except KeyboardInterrupt:
        pass
    except SystemExit as exc:  # the client's exit notification
        code = exc.code
    finally:
        server.shutdown()
    if code:
        raise SystemExit(code)
