"""Start-up and settings: ``initialize``, ``initialized``, and every later settings change.

Settings come from the client (``initializationOptions``, ``workspace/configuration`` pulled
per folder, ``didChangeConfiguration`` pushed) over each project's ``[tool.frognano]``; a bad
value is shown once as a warning and the default is used (``settings.py``).
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import fields
from pathlib import Path
from typing import Any

from lsprotocol import types

from .. import __version__
from . import convert
from .settings import camel, engine_settings, parse_client, section
from .state import FrogNanoServer

WATCHED = ("**/*.py", "**/pyproject.toml")  # what the client reports changes of


def initialize(ls: FrogNanoServer, params: types.InitializeParams) -> None:
    ls.loop = asyncio.get_running_loop()
    ls.settings_ready = asyncio.Event()
    ls.init_options = section(params.initialization_options)
    ls.options, _, _ = parse_client(ls.init_options)  # problems are shown once settings are complete
    folders = [convert.uri_to_path(f.uri) for f in params.workspace_folders or []]
    if not folders and params.root_uri:
        folders = [convert.uri_to_path(params.root_uri)]
    elif not folders and params.root_path:
        folders = [Path(params.root_path)]
    for folder in folders:
        if folder is not None:
            ls.add_project(folder)
    ls.folderless = not ls.projects


async def initialized(ls: FrogNanoServer, params: types.InitializedParams) -> None:
    await refresh(ls)
    if ls.can("workspace.did_change_watched_files.dynamic_registration"):
        watchers = [types.FileSystemWatcher(glob_pattern=g) for g in WATCHED]
        try:
            await ls.client_register_capability_async(types.RegistrationParams(registrations=[
                types.Registration(id=str(uuid.uuid4()), method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                                   register_options=types.DidChangeWatchedFilesRegistrationOptions(watchers))]))
        except Exception as exc:  # noqa: BLE001 - optional: fixes then rely on text checks only
            ls.log(f"FrogNano: cannot watch files ({exc})", types.MessageType.Warning)
    names = ", ".join(str(p.folder) for p in ls.projects.values()) or "no folder yet"
    ls.log(f"FrogNano {__version__} serving {names}; autoFix {ls.options.auto_fix}")
    ls.status(None, "idle", message="open or save a Python file to run its tests")


def did_change_configuration(ls: FrogNanoServer, params: types.DidChangeConfigurationParams) -> None:
    ls.pushed_options = section(params.settings) or None
    ls.spawn(refresh(ls))


async def refresh(ls: FrogNanoServer) -> None:
    """Settings from the client (pulled per folder when it can), over pyproject.toml."""
    try:
        await _refresh(ls)
    finally:
        if ls.settings_ready is not None:
            ls.settings_ready.set()


async def _refresh(ls: FrogNanoServer) -> None:
    projects = list(ls.projects.values())
    base = {**ls.init_options, **(ls.pushed_options or {})}
    raw = await _pull(ls, projects)
    problems: list[str] = []
    options, more, unknown = parse_client({**base, **section(raw[0])} if projects else base)
    problems += more
    for project, answer in zip(projects, raw):
        opts, more, unknown_here = parse_client({**base, **section(answer)})
        problems += [p for p in more if p not in problems]
        unknown += [u for u in unknown_here if u not in unknown]
        settings, more = await asyncio.to_thread(engine_settings, project.root, opts.engine)
        changed = [f"{camel(f.name)}={getattr(settings, f.name)!r}" for f in fields(settings)
                   if getattr(settings, f.name) != getattr(project.settings, f.name)]
        if changed:
            ls.log(f"FrogNano: settings of {project.folder.name}: {', '.join(changed)}")
        project.settings = settings
        problems += [f"{p} ({project.folder.name})" for p in more]
    if unknown:
        ls.log(f"FrogNano: ignoring unknown settings {', '.join(sorted(set(unknown)))}", types.MessageType.Warning)
    mode_changed = options.auto_fix != ls.options.auto_fix
    ls.options = options
    for message in problems:
        if message not in ls.shown:
            ls.warn_user(message)
    ls.shown = set(problems)
    if mode_changed and ls.last_status is not None:
        st = ls.last_status
        ls.status(ls.active, st.state, st.failing, st.message)


async def _pull(ls: FrogNanoServer, projects: list) -> list[Any]:
    """Each project's ``frognano`` section by ``workspace/configuration`` (None where the client
    cannot answer)."""
    if not projects or not ls.can("workspace.configuration"):
        return [None] * len(projects)
    items = [types.ConfigurationItem(scope_uri=convert.path_to_uri(p.folder), section="frognano") for p in projects]
    try:
        return list(await ls.workspace_configuration_async(types.ConfigurationParams(items=items)))
    except Exception as exc:  # noqa: BLE001 - a client that fails this keeps the init options
        ls.log(f"FrogNano: workspace/configuration failed ({exc}); using initializationOptions",
               types.MessageType.Warning)
        return [None] * len(projects)
