"""The Mutation record both consumers store and replay, and the package's error type.

A mutation is a minimal text span replacement of the original source, so it has an exact inverse
(swap ``old`` and ``new``); its inverse operator is looked up in ``INVERSES``, which the
catalogue (``operators/__init__.py``) fills as it is built.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace


class OperatorError(Exception):
    """Source that does not parse, a mutation that does not match its source, an unknown operator."""


# --------------------------------------------------------------------------------------------
# Mutation: the unit both consumers store and replay
# --------------------------------------------------------------------------------------------

# Each catalogue operator's name -> the name of the operator that undoes it.  Filled by the
# catalogue rather than looked up in it: the catalogue is built from modules that import this
# one, so importing it here would close a circle.  Importing this module runs the package's
# ``__init__`` first, so the table is full before any Mutation exists.
INVERSES: dict[str, str] = {}

# Tokens for Mutation.size: identifiers/numbers, two-character operators, any other character.
_TOKEN = re.compile(r"\w+|\*\*=?|//=?|<<=?|>>=?|[=!<>+\-*/%&|^@:]=|->|\S")


@dataclass(frozen=True)
class Mutation:
    operator: str  # catalogue name, e.g. "compare"
    path: str  # posix path relative to the project root (may be "")
    start: int  # character offset in the str source where `old` begins
    old: str  # exact text replaced (minimal span)
    new: str  # replacement text
    line: int  # 1-based line where the mutated node starts (matched against suspicious lines)
    end_line: int  # 1-based line where the mutated node ends
    function: str  # qualified name of the enclosing top-level function or method
    description: str  # short human text, e.g. "`<` -> `<=`"

    @property
    def end(self) -> int:
        return self.start + len(self.old)

    @property
    def size(self) -> int:
        """Edit size for ranking: tokens in the larger side of the minimal span (at least 1)."""
        return max(len(_TOKEN.findall(self.old)), len(_TOKEN.findall(self.new)), 1)

    def apply(self, source: str) -> str:
        if source[self.start : self.end] != self.old:
            found = source[self.start : self.end]
            raise OperatorError(
                f"{self.path or '<source>'}:{self.line}: expected {self.old!r} at offset "
                f"{self.start}, found {found!r} ({self.operator}: {self.description})"
            )
        return source[: self.start] + self.new + source[self.end :]

    def inverse(self) -> Mutation:
        undoer = INVERSES.get(self.operator)
        if undoer is None:
            raise OperatorError(f"unknown operator {self.operator!r}")
        # Text before `start` is unchanged, so `line` holds in the mutated source; the node's end
        # moves by the number of lines the edit added or removed.
        shift = self.new.count("\n") - self.old.count("\n")
        return replace(
            self,
            operator=undoer,
            old=self.new,
            new=self.old,
            end_line=max(self.line, self.end_line + shift),
            description=_reverse_description(self.description),
        )

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping) -> Mutation:
        try:
            return cls(**{f.name: d[f.name] for f in fields(cls)})
        except KeyError as exc:
            raise OperatorError(f"mutation record lacks {exc.args[0]!r}") from None


_VERB_PAIRS = [
    ("remove condition ", "restore condition "),
    ("remove ", "insert "),
]


def _reverse_description(text: str) -> str:
    parts = text.split("` -> `")
    if len(parts) == 2 and parts[0].startswith("`") and parts[1].endswith("`"):
        return f"`{parts[1][:-1]}` -> `{parts[0][1:]}`"
    swap = re.fullmatch(r"swap `(.*)` and `(.*)`", text, flags=re.S)
    if swap:
        return f"swap `{swap.group(2)}` and `{swap.group(1)}`"
    for a, b in _VERB_PAIRS:
        if text.startswith(a):
            return b + text[len(a) :]
        if text.startswith(b):
            return a + text[len(b) :]
    return text  # self-describing both ways, e.g. "invert `if c:` branches"
