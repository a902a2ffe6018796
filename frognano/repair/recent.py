"""What the user just changed: the lines a fresh failure most often comes from.

Two pictures, merged: the lines changed since the last commit (``git diff HEAD`` of the working
tree, plus untracked files, through GitPython), and, in a session that lives across runs (the
language server, ``watch``), the lines changed since the last run in which every selected test
passed.  Localisation ranks those lines above equally suspicious ones
(``repair/localize.py``); a project without git and a fresh session have neither, and rank as
before.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

log = logging.getLogger(__name__)

# A whole file is new (untracked, or not in the last green run): every line counts as changed.
ALL_LINES: frozenset[int] = frozenset({-1})

Changes = Mapping[str, frozenset[int]]  # project-relative path -> changed lines (ALL_LINES: all)

_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@", re.M)


def touches(changes: Changes, path: str, lines: Iterable[int]) -> bool:
    """Whether any of ``lines`` of ``path`` changed."""
    found = changes.get(path)
    if not found:
        return False
    return -1 in found or not found.isdisjoint(lines)


def hunk_lines(patch: str) -> frozenset[int]:
    """New-side lines a zero-context unified diff adds or replaces; a pure deletion marks the
    line after it (where the removed code was), as the statement there now runs without it."""
    lines: set[int] = set()
    for m in _HUNK.finditer(patch):
        start, count = int(m.group(1)), int(m.group(2) if m.group(2) is not None else 1)
        lines.update(range(start, start + count) if count else (start, start + 1))
    return frozenset(lines)


def git_changes(root: Path, wanted: Callable[[str], bool] = lambda rel: rel.endswith(".py")) -> dict[str, frozenset[int]]:
    """Lines changed since HEAD in the repository holding ``root``, by path relative to ``root``
    (``wanted`` filters them); empty without git, a repository or a first commit."""
    try:
        import git  # GitPython: imported here, since most runs never get this far
    except ImportError:
        return {}
    try:
        repo = git.Repo(root, search_parent_directories=True)
        top = Path(repo.working_tree_dir or root).resolve()
        base = root.resolve()
        out: dict[str, frozenset[int]] = {}
        for diff in repo.head.commit.diff(None, create_patch=True, unified=0):
            if diff.b_path is None:  # deleted: no line left to rank
                continue
            rel = _under(top / diff.b_path, base)
            if rel is None or not wanted(rel):
                continue
            patch = diff.diff.decode("utf-8", "replace") if isinstance(diff.diff, bytes) else str(diff.diff)
            out[rel] = ALL_LINES if diff.new_file else hunk_lines(patch)
        for path in repo.untracked_files:
            rel = _under(top / path, base)
            if rel is not None and wanted(rel):
                out[rel] = ALL_LINES
        return out
    except Exception as exc:  # noqa: BLE001 - no repository, no HEAD yet, git missing: no picture
        log.debug("no recent changes from git under %s: %s", root, exc)
        return {}


def _under(path: Path, base: Path) -> str | None:
    try:
        return path.resolve().relative_to(base).as_posix()
    except ValueError:
        return None


def text_changes(before: str, after: str) -> frozenset[int]:
    """Lines of ``after`` that differ from ``before`` (inserted or replaced)."""
    lines: set[int] = set()
    matcher = difflib.SequenceMatcher(None, before.splitlines(), after.splitlines(), autojunk=False)
    for tag, _i1, _i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        lines.update(range(j1 + 1, j2 + 1) if j2 > j1 else (j1 + 1,))
    return frozenset(lines)


class GreenSnapshot:
    """The project's Python sources as of the last run in which every selected test passed, kept
    by a session that lives across runs; ``changes`` diffs the current texts against it."""

    def __init__(self) -> None:
        self._texts: dict[str, str] = {}
        self._signatures: dict[str, object] = {}
        self.taken = False

    def record(self, signatures: Mapping[str, object], read: Callable[[str], str | None]) -> None:
        """Remember the files as they are now (re-reading only those whose signature moved)."""
        for rel, sig in signatures.items():
            if self._signatures.get(rel) != sig or rel not in self._texts:
                text = read(rel)
                if text is None:
                    continue
                self._texts[rel] = text
            self._signatures[rel] = sig
        for rel in set(self._texts) - set(signatures):
            self._texts.pop(rel, None)
            self._signatures.pop(rel, None)
        self.taken = True

    def changes(self, signatures: Mapping[str, object], read: Callable[[str], str | None]) -> dict[str, frozenset[int]]:
        """Lines changed since the snapshot (files it did not hold: every line)."""
        if not self.taken:
            return {}
        out: dict[str, frozenset[int]] = {}
        for rel, sig in signatures.items():
            if rel not in self._texts:
                out[rel] = ALL_LINES
            elif self._signatures.get(rel) != sig:
                text = read(rel)
                if text is not None and text != self._texts[rel]:
                    out[rel] = text_changes(self._texts[rel], text)
        return out


def merge(*pictures: Mapping[str, frozenset[int]]) -> dict[str, frozenset[int]]:
    out: dict[str, frozenset[int]] = {}
    for picture in pictures:
        for rel, lines in picture.items():
            old = out.get(rel)
            out[rel] = ALL_LINES if ALL_LINES in (old, lines) else (old or frozenset()) | lines
    return out
