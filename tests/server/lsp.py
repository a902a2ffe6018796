"""A pytest-lsp client driving the real ``frognano serve`` over stdio, and small helpers."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Union

from lsprotocol import types
from pygls.uris import from_fs_path
from pytest_lsp import LanguageClient, client_capabilities
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, default_converter, register_lsp_features

STATUS = "frognano/status"
RESULT = "frognano/result"


def uri(path: Path) -> str:
    return from_fs_path(str(path))


def _plain(value: Any) -> Any:
    if hasattr(value, "_asdict"):
        value = value._asdict()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def make_client(accept_edits: bool = True) -> LanguageClient:
    """The pytest-lsp test client, plus what FrogNano's clients handle: status, applyEdit
    (an accepted edit is written to the files, as an editor would), dynamic registrations; and
    every publishDiagnostics kept whole (``published``), version included."""
    features = dict(DEFAULT_CLIENT_FEATURES)

    def on_publish(client: LanguageClient, params: types.PublishDiagnosticsParams) -> None:
        client.diagnostics[params.uri] = params.diagnostics
        client.published.append(params)  # type: ignore[attr-defined]

    features[types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = on_publish
    client = LanguageClient(converter_factory=default_converter)
    register_lsp_features(client, features)
    client.published = []  # type: ignore[attr-defined]
    client.registrations = []  # type: ignore[attr-defined]
    client.edit_root = None  # type: ignore[attr-defined]
    # lsprotocol reads any code action with a "command" key as a bare Command; tell them apart
    # the way editors do (a bare Command's "command" is a string).
    converter = client.protocol._converter

    def command_or_action(obj: Any, _: Any) -> Any:
        kind = types.Command if isinstance(obj.get("command"), str) else types.CodeAction
        return converter.structure(obj, kind)

    converter.register_structure_hook(Union[types.Command, types.CodeAction], command_or_action)
    client.statuses = []  # type: ignore[attr-defined]
    client.applied_edits = []  # type: ignore[attr-defined]
    client.accept_edits = accept_edits  # type: ignore[attr-defined]

    @client.feature(STATUS)
    def on_status(params: Any) -> None:
        client.statuses.append(_plain(params))  # type: ignore[attr-defined]

    client.results = {}  # type: ignore[attr-defined]

    @client.feature(RESULT)
    def on_result(params: Any) -> None:
        result = _plain(params)
        client.results[result["job"]] = result  # type: ignore[attr-defined]

    @client.feature(types.WORKSPACE_APPLY_EDIT)
    def on_apply_edit(params: types.ApplyWorkspaceEditParams) -> types.ApplyWorkspaceEditResult:
        client.applied_edits.append(params)  # type: ignore[attr-defined]
        if client.accept_edits:  # type: ignore[attr-defined]
            if client.edit_root is not None:  # type: ignore[attr-defined]
                apply_workspace_edit(params.edit, client.edit_root)  # type: ignore[attr-defined]
            return types.ApplyWorkspaceEditResult(applied=True)
        return types.ApplyWorkspaceEditResult(applied=False, failure_reason="the test client refuses edits")

    @client.feature(types.CLIENT_REGISTER_CAPABILITY)
    def on_register(params: types.RegistrationParams) -> None:
        client.registrations.extend(params.registrations)  # type: ignore[attr-defined]
        return None

    return client


@contextlib.asynccontextmanager
async def serve(root: Path, init_options: dict | None = None, *, configuration: dict | None = None,
                accept_edits: bool = True) -> AsyncIterator[LanguageClient]:
    """Start ``frognano serve`` for the project at ``root`` and initialise it like VS Code does.

    ``autoFix`` is "off" unless ``init_options`` says otherwise: most tests follow what one
    request does, without a background search beside it (``{"autoFix": None}``: the default)."""
    client = make_client(accept_edits)
    client.edit_root = root  # type: ignore[attr-defined]
    if configuration is not None:
        client.set_configuration(configuration, section="frognano")
    await client.start_io(sys.executable, "-m", "frognano", "serve")
    try:
        await client.initialize_session(types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"),
            root_uri=uri(root),
            workspace_folders=[types.WorkspaceFolder(uri=uri(root), name=root.name)],
            initialization_options={"autoFix": "off", **(init_options or {})},
        ))
        await wait_for(lambda: client.statuses, what="the first frognano/status")  # type: ignore[attr-defined]
        yield client
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(client.shutdown_session(), 15)
        await client.stop()


async def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, what: str = "") -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what or predicate}")
        await asyncio.sleep(0.02)


def open_doc(client: LanguageClient, path: Path, version: int = 1, text: str | None = None,
             language: str = "python") -> str:
    u = uri(path)
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
        uri=u, language_id=language, version=version, text=path.read_text() if text is None else text)))
    return u


def save(client: LanguageClient, path: Path) -> None:
    client.text_document_did_save(types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(uri(path))))


def change(client: LanguageClient, path: Path, version: int, text: str) -> None:
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri(path), version=version),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)]))


def last_state(client: LanguageClient) -> dict:
    return client.statuses[-1] if client.statuses else {}  # type: ignore[attr-defined]


async def wait_state(client: LanguageClient, *states: str, timeout: float = 30.0, after: int = 0) -> dict:
    """The first status, from index ``after`` on, in one of ``states``."""
    def found() -> dict | None:
        for st in client.statuses[after:]:  # type: ignore[attr-defined]
            if st["state"] in states:
                return st
        return None

    return await wait_for(found, timeout, f"status {'|'.join(states)} (seen {client.statuses[after:]})")  # type: ignore[attr-defined]


async def code_actions(client: LanguageClient, path: Path, line: int, diagnostics: list | None = None,
                       end_line: int | None = None) -> list[types.CodeAction]:
    result = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri(path)),
        range=types.Range(types.Position(line, 0), types.Position(end_line if end_line is not None else line, 0)),
        context=types.CodeActionContext(diagnostics=diagnostics or [])))
    return list(result or [])


async def command(client: LanguageClient, name: str, *args: Any) -> Any:
    return await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=name, arguments=list(args)))


async def run_command(client: LanguageClient, name: str, *args: Any, timeout: float = 180.0) -> Any:
    """A command and, for one that started a job (``{"status": "started"}``), the result its
    ``frognano/result`` notification carries once the work ends."""
    answer = _plain(await command(client, name, *args))
    if not (isinstance(answer, dict) and answer.get("status") == "started"):
        return answer
    job = answer["job"]
    done = await wait_for(lambda: client.results.get(job), timeout, what=f"the result of {name} ({job})")  # type: ignore[attr-defined]
    return done["result"]


def apply_workspace_edit(edit: types.WorkspaceEdit, root: Path) -> list[Path]:
    """Apply a WorkspaceEdit's TextDocumentEdits to the files on disk, like an editor would."""
    from frognano.server.convert import lsp_lines, uri_to_path

    written = []
    for change_ in edit.document_changes or []:
        path = uri_to_path(change_.text_document.uri)
        assert path is not None and root in path.parents, path
        text = path.read_text()
        lines = lsp_lines(text)

        def offset(pos: types.Position) -> int:
            return sum(len(ln) for ln in lines[: pos.line]) + pos.character

        for e in sorted(change_.edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
            text = text[: offset(e.range.start)] + e.new_text + text[offset(e.range.end):]
        path.write_text(text)
        written.append(path)
    return written
