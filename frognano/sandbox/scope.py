"""Whether a folder is a project FrogNano may copy.

Every face (``fix``, ``watch``, ``undo``, the language server, ``eval``, ``synth``, training)
copies the folder it is given into the cache and runs code from it, so the folder must be a
project, not a place: ``/``, a home folder (or a folder above one: it holds a home folder)
are refused outright, and a tree without a project marker (``PROJECT_MARKERS`` at its top) is
refused once it is bigger than a project plausibly is.  The size is counted with ``os.scandir``
over what the shadow copy would take (``project_paths.ignored_dir`` folders skipped) and the walk
stops at the limit, so a refusal costs milliseconds whatever the tree holds; a marked project
costs a few ``stat`` calls.  The limits come from the environment (``MAX_FILES_ENV``,
``MAX_BYTES_ENV``) and the refusal names the one it met.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from ..project_paths import ignored_dir

__all__ = ["MAX_BYTES_ENV", "MAX_FILES_ENV", "PROJECT_MARKERS", "ROOT_FILES", "Limits", "check_scope", "project_root",
           "refusal"]

# Files or folders at a tree's top that say "this is a Python project (or a repository)".
PROJECT_MARKERS = (
    "pyproject.toml", "setup.py", "setup.cfg", "tox.ini", "pytest.ini", "pytest.toml", ".pytest.toml",
    "conftest.py", "noxfile.py", "requirements.txt", "Pipfile", "environment.yml", ".git", ".hg",
)
# The files pytest looks for when it chooses the rootdir (its configuration files, then setup.py).
ROOT_FILES = ("pytest.ini", "pytest.toml", ".pytest.toml", "pyproject.toml", "tox.ini", "setup.cfg", "setup.py")
MAX_FILES_ENV = "FROGNANO_SCOPE_MAX_FILES"
MAX_BYTES_ENV = "FROGNANO_SCOPE_MAX_BYTES"


@dataclass(frozen=True)
class Limits:
    """How big a tree without a project marker may be."""

    files: int = 20_000
    bytes: int = 1 << 30

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Limits:
        env = os.environ if environ is None else environ
        return cls(_positive(env, MAX_FILES_ENV, cls.files), _positive(env, MAX_BYTES_ENV, cls.bytes))


def _positive(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{name}={text!r}: not a whole number") from None
    if value < 1:
        raise UsageError(f"{name}={text!r}: must be at least 1")
    return value


def _homes() -> set[str]:
    """The user's home folder as $HOME says and as the password database says (either may be
    what the user means by ``~``)."""
    homes = set()
    for home in (os.environ.get("HOME"), _passwd_home()):
        if home and os.path.isabs(home):
            homes.add(os.path.realpath(home))
    return homes


def _passwd_home() -> str | None:
    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except (KeyError, OSError):
        return None


def _over(root: str, limits: Limits) -> str | None:
    """Which limit the tree at ``root`` exceeds ("20000 files"), or None; stops walking at it."""
    files = size = 0
    stack = [root]
    while stack:
        try:
            it = os.scandir(stack.pop())
        except OSError:  # unreadable: the copy would not take it either
            continue
        with it:
            for entry in it:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if not ignored_dir(entry.path, entry.name):
                            stack.append(entry.path)
                        continue
                    files += 1
                    if entry.is_file(follow_symlinks=False):
                        size += entry.stat(follow_symlinks=False).st_size
                except OSError:
                    continue
                if files > limits.files:
                    return f"more than {limits.files} files (raise {MAX_FILES_ENV} to allow more)"
                if size > limits.bytes:
                    return f"more than {limits.bytes} bytes (raise {MAX_BYTES_ENV} to allow more)"
    return None


def refusal(root: Path | str, limits: Limits | None = None) -> str | None:
    """Why FrogNano must not copy the folder ``root`` (one line), or None when it may."""
    real = os.path.realpath(root)
    shown = str(root)
    if real == os.path.realpath(os.sep):
        return f"{shown}: the file system's root is not a project; give the project's folder"
    for home in _homes():
        if real == home:
            return f"{shown}: your home folder is not a project; give the project's folder"
        if home.startswith(real.rstrip(os.sep) + os.sep):
            return f"{shown}: holds your home folder ({home}), so it is not a project; give the project's folder"
    if any(os.path.lexists(os.path.join(real, m)) for m in PROJECT_MARKERS):
        return None
    why = _over(real, limits or Limits.from_env())
    if why is not None:
        return (f"{shown}: no project marker ({', '.join(PROJECT_MARKERS[:3])}, ...) and {why}: "
                "not copied; give the project's folder, or add a pyproject.toml")
    return None


def project_root(folder: Path) -> Path:
    """The project ``folder`` belongs to, found the way pytest finds its rootdir: the nearest of
    the folder and its ancestors that holds one of ROOT_FILES, with or without a ``.git``.  An
    editor that finds roots by version control sends a package folder (``calc/calc``) when the
    project has no repository; its tests live above it.  The walk stops at a repository's top
    (``.git``, ``.hg``: that folder is the project) and never reaches a home folder or the file
    system's root; without a configuration file or a repository, the topmost ancestor holding a
    ``conftest.py``, else the folder itself.  Spelled
    as ``folder`` is (a parent of it), so editors' paths still match."""
    folder = Path(os.path.normpath(folder))
    conftest = None
    for here in (folder, *folder.parents):
        real = os.path.realpath(here)
        if real == os.path.realpath(os.sep) or real in _homes():
            break
        if any(os.path.isfile(os.path.join(real, name)) for name in ROOT_FILES):
            return here
        if os.path.isfile(os.path.join(real, "conftest.py")):
            conftest = here
        if any(os.path.lexists(os.path.join(real, vcs)) for vcs in (".git", ".hg")):
            return here  # a repository without configuration is its own project
    return conftest or folder


def check_scope(root: Path | str, limits: Limits | None = None) -> None:
    """``UsageError`` (exit 2, one line) when ``root`` is no project FrogNano may copy."""
    why = refusal(root, limits)
    if why is not None:
        raise UsageError(why)
