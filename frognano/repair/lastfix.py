"""The last verified fix of a project, kept so that ``fix --apply`` need not search again.

A fix is only as good as the files it was verified on (invariant 1), so it is stored with the
content hash of every project file at the time (the files the shadow copy holds) and with what
selected the tests (``-k``, ``test_args``, the interpreter).  It is offered again only while all
of those are unchanged; otherwise the caller searches again.  One file per project, in
FrogNano's cache (``paths.project_cache``), written atomically.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from ..paths import cache_root, project_cache
from ..sandbox.listing import list_project
from .patch import EditNote, EpisodeRecord, FileEdit, Fix, Patch, Verification

log = logging.getLogger(__name__)

_VERSION = 1


def fingerprint(root: Path) -> dict[str, str]:
    """``{relative path: sha256}`` of the project's files (symlinks by their target text)."""
    hashes: dict[str, str] = {}
    own = os.path.relpath(os.path.realpath(cache_root()), os.path.realpath(root))  # a cache inside the project
    for entry in list_project(root):
        if entry.rel == own or entry.rel.startswith(own + "/"):
            continue  # FrogNano's own files (shadow copies, this record) are not the project's
        digest = hashlib.sha256()
        if entry.link is not None:
            digest.update(b"link:" + os.fsencode(entry.link))
        else:
            try:
                with open(root / entry.rel, "rb") as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        digest.update(chunk)
            except OSError:  # gone since listed: it counts as a change
                continue
        hashes[entry.rel] = digest.hexdigest()
    return hashes


@dataclass
class SavedFix:
    fix: Fix
    failing: list[str]
    files: dict[str, str]  # the fingerprint the fix was verified on
    context: dict[str, object] = field(default_factory=dict)  # what selected the tests
    created: str = ""  # ISO time, for the report

    def changed(self, now: dict[str, str]) -> list[str]:
        """The files added, removed or edited since the fix was verified."""
        return sorted(rel for rel in set(self.files) | set(now) if self.files.get(rel) != now.get(rel))


def _file(root: Path) -> Path:
    return project_cache(root) / "last-fix.json"


def save(root: Path, fix: Fix, failing: list[str], files: dict[str, str], context: dict[str, object]) -> None:
    """Keep ``fix`` (verified on ``files``) as the project's last fix; a failure only logs."""
    data = {
        "version": _VERSION, "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "failing": failing, "files": files, "context": context, "source": fix.source,
        "edits": [{"path": e.path, "before": e.before, "after": e.after} for e in fix.patch.edits],
        "verified": {"fail_to_pass": fix.verified.fail_to_pass, "pass_to_pass": fix.verified.pass_to_pass,
                     "scope": fix.verified.scope},
        "notes": [{"path": n.path, "line": n.line, "description": n.description} for n in fix.notes],
        "record": ({"episode": fix.record.episode, "path": str(fix.record.path) if fix.record.path else None}
                   if fix.record else None),
        "edits_tests": fix.edits_tests,
    }
    target = _file(root)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".last-fix-")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, target)
    except OSError as exc:  # the fix is still printed; only the shortcut is lost
        log.warning("could not keep the fix for a later --apply: %s", exc)


def load(root: Path) -> SavedFix | None:
    """The project's last verified fix, or None (none kept, or a file this version cannot read)."""
    try:
        data = json.loads(_file(root).read_text(encoding="utf-8"))
        if data.get("version") != _VERSION:
            return None
        edits = tuple(FileEdit(e["path"], e["before"], e["after"]) for e in data["edits"])
        v = data["verified"]
        rec = data.get("record")
        fix = Fix(Patch(edits), Verification(list(v["fail_to_pass"]), int(v["pass_to_pass"]), v["scope"]),
                  data["source"], [EditNote(n["path"], int(n["line"]), n["description"]) for n in data["notes"]],
                  bool(data.get("edits_tests")),
                  EpisodeRecord(int(rec["episode"]), Path(rec["path"]) if rec["path"] else None) if rec else None)
        return SavedFix(fix, list(data["failing"]), dict(data["files"]), dict(data.get("context") or {}),
                        str(data.get("created", "")))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.info("ignoring the kept fix: %s", exc)
        return None


def forget(root: Path) -> None:
    try:
        _file(root).unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.info("could not remove the kept fix: %s", exc)
