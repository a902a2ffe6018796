"""Apply a task's patch (a git-style unified diff) to text, strictly.

Tasks carry their bug as a unified diff (docs/ARCHITECTURE.md §6): ``synth`` writes them with difflib, and
SWE-smith / SWE-bench rows with git.  Applying one is the first thing evaluation and training
do with a task, and a patch that does not fit its tree must be that task's named error, never a
silently different bug: each hunk's old lines must match exactly, at the line the header
names or, failing that, at exactly one other place in the file (the same tolerance as ``git
apply`` without fuzz).  Lines split on ``\\n`` only, so ``\\r\\n`` and form feeds survive.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import FrogNanoError

__all__ = ["FilePatch", "PatchError", "apply_patch", "parse_patch"]

_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(FrogNanoError):
    """A patch that cannot be read, or does not apply to the tree it names."""


@dataclass
class Hunk:
    start: int  # 1-based first old line (0 for an insertion into an empty file)
    old: list[str] = field(default_factory=list)  # old lines, with their line endings
    new: list[str] = field(default_factory=list)


@dataclass
class FilePatch:
    old_path: str | None  # None: the file is created
    new_path: str | None  # None: the file is deleted
    hunks: list[Hunk] = field(default_factory=list)

    @property
    def path(self) -> str:
        return self.new_path or self.old_path or ""


def _lines(text: str) -> list[str]:
    """Lines with their endings, split on ``\n`` only (a last line may lack one)."""
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _path(header: str) -> str | None:
    name = header.split("\t", 1)[0].rstrip("\n").rstrip("\r")
    if name == "/dev/null":
        return None
    if name[:2] in ("a/", "b/"):
        return name[2:]
    raise PatchError(f"patch names {name!r} without an a/ or b/ prefix")


def parse_patch(diff: str) -> list[FilePatch]:
    """The files and hunks of a unified diff (``diff --git`` headers optional)."""
    lines = _lines(diff)
    files: list[FilePatch] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            files.append(FilePatch(_path(line[4:]), _path(lines[i + 1][4:])))
            i += 2
            continue
        match = _HUNK.match(line)
        if match:
            if not files:
                raise PatchError("a hunk before any file header (--- a/PATH, +++ b/PATH)")
            hunk = Hunk(int(match[1]))
            old_left = int(match[2]) if match[2] is not None else 1
            new_left = int(match[4]) if match[4] is not None else 1
            i += 1
            last: list[str] | None = None  # the side(s) the previous line went to
            while i < len(lines) and (old_left > 0 or new_left > 0 or lines[i].startswith("\\")):
                body = lines[i]
                tag, text = body[:1], body[1:]
                if tag == "\\":  # "\ No newline at end of file": the line before has no newline
                    for side in last or []:
                        side[-1] = side[-1].rstrip("\n")
                    i += 1
                    continue
                if tag == " " or body in ("\n", "\r\n"):  # some tools strip the space of blank context
                    text = text if tag == " " else body
                    hunk.old.append(text)
                    hunk.new.append(text)
                    old_left, new_left, last = old_left - 1, new_left - 1, [hunk.old, hunk.new]
                elif tag == "-":
                    hunk.old.append(text)
                    old_left, last = old_left - 1, [hunk.old]
                elif tag == "+":
                    hunk.new.append(text)
                    new_left, last = new_left - 1, [hunk.new]
                else:
                    raise PatchError(f"line {i + 1} of the patch is not part of its hunk: {body[:60]!r}")
                i += 1
            if old_left or new_left:
                raise PatchError(f"a hunk of {files[-1].path} ends early (its header counts more lines)")
            files[-1].hunks.append(hunk)
            continue
        i += 1  # "diff --git", "index", mode lines and other git metadata
    if not files:
        raise PatchError("not a unified diff: no file header (--- a/PATH, +++ b/PATH)")
    return files


def _apply_file(fp: FilePatch, text: str) -> str:
    lines = _lines(text)
    out: list[str] = []
    pos = 0  # lines[:pos] are done
    for n, hunk in enumerate(fp.hunks, 1):
        want = max(hunk.start - 1, 0)
        size = len(hunk.old)
        if not (want >= pos and lines[want:want + size] == hunk.old):
            places = [at for at in range(pos, len(lines) - size + 1) if lines[at:at + size] == hunk.old]
            if len(places) != 1:
                why = "its lines are not in the file" if not places else f"its lines occur {len(places)} times"
                raise PatchError(f"hunk {n} of {fp.path} does not apply at line {hunk.start}: {why}")
            want = places[0]
        out.extend(lines[pos:want])
        out.extend(hunk.new)
        pos = want + size
    out.extend(lines[pos:])
    return "".join(out)


def apply_patch(diff: str, read: Callable[[str], str | None]) -> dict[str, str | None]:
    """The new text of every file ``diff`` touches (None: deleted); ``read(path)`` gives a
    file's current text, None when it does not exist.  Raises ``PatchError``."""
    result: dict[str, str | None] = {}
    for fp in parse_patch(diff):
        if fp.old_path is None:
            current = ""
            if read(fp.path) is not None:
                raise PatchError(f"the patch creates {fp.path}, which exists")
        else:
            source = result.get(fp.old_path) if fp.old_path in result else read(fp.old_path)
            if source is None:
                raise PatchError(f"the patch changes {fp.old_path}, which does not exist")
            current = source
        new = _apply_file(fp, current)
        if fp.new_path is None:
            result[fp.old_path or ""] = None
        else:
            if fp.old_path and fp.old_path != fp.new_path:
                result[fp.old_path] = None
            result[fp.new_path] = new
    return result
