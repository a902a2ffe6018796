"""``.gitignore`` rules for projects that are not git repositories (git itself answers otherwise).

The common subset of gitignore(5): blank lines and ``#`` comments, ``!`` negation, a trailing
``/`` (folders only), a leading or inner ``/`` anchoring the pattern to the file's folder,
``*``, ``?``, ``[...]``, ``**`` (any number of folders), backslash escapes, and nested
``.gitignore`` files whose rules apply below their folder and win over their parents'.  As in
git, a file inside an ignored folder cannot be re-included by a negation (the folder is never
walked).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Rule:
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool


def _translate(pattern: str) -> str:
    """The regular expression of one glob, matched against a path relative to the rule's folder."""
    out, i, n = [], 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**", i):
                before_ok = i == 0 or pattern[i - 1] == "/"
                after = pattern[i + 2:i + 3]
                if before_ok and after == "/":  # "**/": zero or more folders
                    out.append("(?:.*/)?")
                    i += 3
                    continue
                if before_ok and i + 2 == n:  # trailing "/**": everything inside
                    out.append(".*")
                    i += 2
                    continue
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.find("]", i + 2 if pattern[i + 1:i + 2] in ("!", "^") else i + 1)
            if end < 0:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1:end]
                if body[:1] in ("!", "^"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = end
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def parse(text: str) -> list[Rule]:
    rules: list[Rule] = []
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        if not line.strip() or line.startswith("#"):
            continue
        # Trailing spaces are ignored unless escaped.
        while line.endswith(" ") and not line.endswith("\\ "):
            line = line[:-1]
        negate = line.startswith("!")
        if negate:
            line = line[1:]
        elif line.startswith("\\!") or line.startswith("\\#"):
            line = line[1:]
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        if not line:
            continue
        # A slash at the start or in the middle anchors the pattern to the .gitignore's folder;
        # without one it matches a name at any depth.
        anchored = "/" in line
        body = _translate(line.lstrip("/"))
        regex = re.compile(("" if anchored else "(?:.*/)?") + body + r"\Z", re.DOTALL)
        rules.append(Rule(regex, negate, dir_only))
    return rules


class Ignore:
    """The ignore rules in force while walking a tree top-down (``enter`` each folder first)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._rules: dict[str, list[Rule]] = {}  # folder (relative, "" for the root) -> its rules

    def enter(self, folder: str) -> None:
        """Read ``folder``'s own .gitignore (relative to the root), if it has one."""
        path = self.root / folder / ".gitignore" if folder else self.root / ".gitignore"
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return
        rules = parse(text)
        if rules:
            self._rules[folder] = rules

    def ignored(self, rel: str, is_dir: bool) -> bool:
        """Whether ``rel`` (relative to the root, "/"-separated) is ignored; the last matching
        rule decides, and rules of deeper folders come after their parents'."""
        verdict = False
        parts = rel.split("/")
        for depth in range(len(parts)):
            folder = "/".join(parts[:depth])
            rules = self._rules.get(folder)
            if not rules:
                continue
            sub = "/".join(parts[depth:])
            for rule in rules:
                if rule.dir_only and not is_dir:
                    continue
                if rule.regex.match(sub):
                    verdict = not rule.negate
        return verdict
