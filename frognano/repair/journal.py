"""A patch's files all swapped in, or none, even across a kill -9 (one file: ``exchange``).

Under a per-project lock, a journal ``undo/<record>.journal.json`` naming every temp is written
before the first temp exists, and is removed only once the record is complete (the manifest
written) or gone (rolled back).  The next apply, undo or ``frognano fix`` of the project resolves a
journal left behind from the files on disk: every file exchanged and every displaced file as
expected -> the record is completed; otherwise the exchanged files are exchanged back, the temps
removed and the record deleted.  So the project is never left half-patched, no temp stays in it,
and ``frognano undo`` never "undoes" a fix that was never applied.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from ..errors import ApplyError
from .exchange import (
    TEMP_NAME,
    UNSUPPORTED,
    Changed,
    Swap,
    exchange_files,
    file_sha,
    holds,
    swap_in,
    swap_out,
    unlink_if_present,
    write_temp,
)

log = logging.getLogger(__name__)

_STALE_TEMP_SECONDS = 60.0  # a temp this old is stale even if its pid is alive (an apply takes ms)
_LOCK_SECONDS = 30.0


def _move_into(src: Path, dst: Path) -> None:
    """Move ``src`` to ``dst``: the same file when on one filesystem, else a copy."""
    try:
        os.replace(src, dst)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    part = dst.with_name(dst.name + ".part")
    with open(src, "rb") as fin, open(part, "wb") as fout:
        shutil.copyfileobj(fin, fout)
        fout.flush()
        os.fsync(fout.fileno())  # the original goes next: its copy must be on disk first
    os.replace(part, dst)
    os.unlink(src)


def write_json(path: Path, data: dict) -> None:
    part = path.with_name(path.name + ".part")
    part.write_text(json.dumps(data, indent=1))
    os.replace(part, path)


@contextlib.contextmanager
def locked(undo_root: Path, root: Path) -> Iterator[None]:
    """The project's undo folder (created if need be), held by one apply, undo or recovery at a
    time, threads and processes alike."""
    try:
        undo_root.mkdir(parents=True, exist_ok=True)
        fd = os.open(undo_root / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise ApplyError(f"cannot write the undo record in {undo_root}: {exc.strerror or exc}; "
                         "nothing was written") from exc
    try:
        try:
            import fcntl
        except ImportError:  # Windows: no flock; the swap's own check still holds
            fcntl = None
        deadline = time.monotonic() + _LOCK_SECONDS
        while fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ApplyError(f"another frognano is writing to {root}; nothing was written") from None
                time.sleep(0.005)
        yield
    finally:
        os.close(fd)  # releases the lock


def _pid_alive(pid: int) -> bool:
    if os.name == "nt":  # os.kill would terminate it there: age alone decides
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _sweep(folders: set[Path]) -> None:
    """Remove temps a killed apply left in ``folders``: only names ``.NAME.<pid>.<hex8>.frognano``
    whose process is gone or that are older than a minute."""
    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            m = TEMP_NAME.match(entry.name)
            if m is None:
                continue
            with contextlib.suppress(OSError):
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(st.st_mode) and (not _pid_alive(int(m["pid"]))
                                                 or time.time() - st.st_mtime > _STALE_TEMP_SECONDS):
                    os.unlink(entry.path)
                    log.info("removed a stale temp file %s", entry.path)


def _commit(journal_path: Path, journal: dict, swaps: list[Swap]) -> None:
    """Every file is swapped in and checked: the displaced files go into the record, then the
    record is marked (apply: its manifest; undo: the manifest renamed undone), then the journal
    goes."""
    record = journal_path.parent / journal["record"]
    for s in swaps:
        if s.how != "created" and s.temp.exists():
            _move_into(s.temp, record / s.copy)
        unlink_if_present(s.side)
    if journal["op"] == "apply":
        write_json(record / "manifest.json", journal["manifest"])
    else:
        with contextlib.suppress(FileNotFoundError):
            os.replace(record / "manifest.json", record / "manifest.undone.json")
    os.unlink(journal_path)


def _discard(journal_path: Path, journal: dict, swaps: list[Swap]) -> None:
    """Nothing was swapped in (or all of it was put back): remove every trace."""
    record = journal_path.parent / journal["record"]
    for s in swaps:
        unlink_if_present(s.temp)
        unlink_if_present(s.side)
        if journal["op"] == "undo":
            unlink_if_present(record / s.copy)
            unlink_if_present(record / (s.copy + ".part"))
    if journal["op"] == "apply":
        shutil.rmtree(record, ignore_errors=True)
    unlink_if_present(journal_path)


def _resolve(journal_path: Path) -> str:
    """Finish or roll back the apply or undo that ``journal_path`` describes, judging from the
    files on disk (its process is gone).  Returns "completed" or "rolled back"."""
    journal = json.loads(journal_path.read_text())
    root, record = Path(journal["root"]), journal_path.parent / journal["record"]
    swaps = [Swap.from_entry(root, f) for f in journal["files"]]
    for s in swaps:  # the fallback's second name: a link to the target, or the displaced file
        if os.path.lexists(s.side):
            if os.path.lexists(s.temp):
                unlink_if_present(s.side)
            else:
                os.rename(s.side, s.temp)
    displaced: list[Path] = []
    if journal["ready"]:  # every temp was complete: a temp not holding the new bytes was swapped
        for s in swaps:
            if s.temp.exists() and file_sha(s.temp) != s.new_sha:
                s.how = "exchange"
                displaced.append(s.temp)
            elif not s.temp.exists() and (record / s.copy).exists():
                s.how = "moved"  # already moved into the record: all were swapped and checked
                displaced.append(record / s.copy)
    if len(displaced) == len(swaps) and all(holds(p, s.expect) for s, p in zip(swaps, displaced)):
        _commit(journal_path, journal, swaps)
        return "completed"
    for s in reversed(swaps):
        if s.how == "exchange":
            try:
                exchange_files(s.temp, s.target)
            except OSError as exc:
                if exc.errno not in UNSUPPORTED:
                    log.warning("could not put back %s: %s", s.target, exc)
                    continue
                s.how = "fallback"  # it went in by the fallback: put it back the same way
            _swap_out_after(s)
    _discard(journal_path, journal, swaps)
    return "rolled back"


def _swap_out_after(s: Swap) -> None:
    """The second half of putting back a file in ``_resolve``."""
    if s.how == "exchange":
        if file_sha(s.temp) not in (s.new_sha, None):  # written to while the fix was there
            with contextlib.suppress(OSError):
                exchange_files(s.temp, s.target)
    elif file_sha(s.target) == s.new_sha:
        os.replace(s.temp, s.target)


def recover_locked(root: Path, undo_root: Path, folders: set[Path]) -> list[str]:
    notes = []
    with os.scandir(undo_root) as entries:
        names = sorted(e.name for e in entries)
    for part in (n for n in names if n.endswith(".part")):  # a JSON write that was killed
        unlink_if_present(undo_root / part)
    for journal_path in (undo_root / n for n in names if n.endswith(".journal.json")):
        try:
            journal = json.loads(journal_path.read_text())
            folders |= {(Path(journal["root"]) / f["path"]).parent for f in journal["files"]}
            outcome = _resolve(journal_path)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("cannot resolve the interrupted write %s: %s", journal_path, exc)
            continue
        note = f"an interrupted {'fix --apply' if journal['op'] == 'apply' else 'undo'} was {outcome}"
        log.warning("%s (%s)", note, ", ".join(f["path"] for f in journal["files"]))
        notes.append(note)
    _sweep(folders)
    return notes


def swap_all(undo_root: Path, journal: dict, swaps: list[Swap], changed: str) -> None:
    """Swap every file in, or none (see the module's docstring)."""
    journal_path = undo_root / f"{journal['record']}.journal.json"
    journal["files"] = [s.entry() for s in swaps]
    journal["ready"] = False
    current = str(journal_path)  # what an OSError is about
    try:
        write_json(journal_path, journal)
        if journal["op"] == "apply":
            (undo_root / journal["record"]).mkdir()
        for s in swaps:
            current = s.rel
            write_temp(s)
        journal["ready"] = True
        write_json(journal_path, journal)
        done: list[Swap] = []
        for s in swaps:
            current = s.rel
            try:
                swap_in(s)
                done.append(s)
            except Changed:
                changed_path = s.rel
                break
        else:
            # Once more, after the last exchange: a write that straddled an earlier file's
            # exchange (its open came first) has landed in that displaced file by now.
            changed_path = next((s.rel for s in swaps if s.how != "created" and not holds(s.temp, s.expect)),
                                None)
        if changed_path is not None:
            for d in reversed(done):
                swap_out(d)
            _discard(journal_path, journal, swaps)
            raise ApplyError(changed.format(path=changed_path))
        _commit(journal_path, journal, swaps)
    except ApplyError:
        raise
    except BaseException as exc:
        try:
            outcome = _resolve(journal_path) if journal_path.exists() else "rolled back"
        except Exception:  # noqa: BLE001 - the next run resolves it; say so
            log.exception("cannot finish or roll back %s", journal_path)
            outcome = "left"
        if not isinstance(exc, OSError):
            raise
        if outcome == "completed":
            return
        what = f"{exc.strerror or exc}"
        if outcome == "left":
            raise ApplyError(f"cannot write {current}: {what}; the next frognano run in this project "
                             "finishes or rolls back this write") from exc
        raise ApplyError(f"cannot write {current}: {what}; nothing was written") from exc
