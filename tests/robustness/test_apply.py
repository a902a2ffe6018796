"""Applying a fix to the user's files: no lost edit, no partial state (docs/ARCHITECTURE.md, invariants 1, 5).

`apply_patch` exchanges each file with a temp holding the fix (renameat2(RENAME_EXCHANGE) here)
and compares what the exchange handed back with the text the fix was computed on.  These cases
race a writer against it, kill it at every step, and force the fallback for filesystems that
cannot exchange.  Every case calls the module's functions through ``P`` at call time, and replaces
a helper in every module that holds it (``_replace``), so a monkeypatch reaches every call.
"""

from __future__ import annotations

import errno
import io
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

import frognano.repair.apply as P
import frognano.repair.exchange as X
import frognano.repair.journal as J
from frognano.errors import ApplyError
from frognano.paths import project_cache
from frognano.repair.patch import FileEdit, Patch

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX file semantics")

BEFORE = "".join(f"def f{i}(x):\n    return x > {i}\n\n\n" for i in range(60))
AFTER = BEFORE.replace("return x > 7\n", "return x >= 7\n")


# ``apply`` and the modules it is built on each hold their own binding of a shared helper.
_MODULES = (P, J, X)


def _replace(name: str, value, setattr_=setattr) -> None:
    """Replace the helper ``name`` wherever it is bound (``setattr_``: e.g. monkeypatch.setattr)."""
    for module in _MODULES:
        if hasattr(module, name):
            setattr_(module, name, value)


def _helper(name: str):
    return next(getattr(module, name) for module in _MODULES if hasattr(module, name))


def _project(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "proj"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _temps(root: Path) -> list[Path]:
    return sorted(root.rglob("*.frognano"))


def _undo_dir(root: Path) -> Path:
    return project_cache(root) / "undo"


def _manifests(root: Path) -> list[Path]:
    return sorted(_undo_dir(root).glob("*/manifest.json"))


# -- (1) racing writes against apply --------------------------------------------------------------

def _in_place(target: Path, line: bytes, before: bytes) -> None:
    """An editor that saves in place: open with O_TRUNC, write the whole buffer."""
    with open(target, "wb") as fh:
        fh.write(before + line)


def _rename_over(target: Path, line: bytes, before: bytes) -> None:
    """An editor's atomic save: write a temp beside the file, rename it over the file."""
    tmp = target.with_name(f".{target.name}.editor-save")
    tmp.write_bytes(before + line)
    os.replace(tmp, target)


def _append(target: Path, line: bytes, before: bytes) -> None:
    """A write into the existing file (O_APPEND), no truncation."""
    with open(target, "ab") as fh:
        fh.write(line)


def _race(root: Path, rel: str, save, iterations: int) -> tuple[Counter, list[int], float]:
    """``iterations`` rounds of: reset the file to the fix's ``before``, start a writer that adds a
    unique line after a random delay spread over one apply, apply.  Returns the outcomes, the
    rounds whose line is neither in the project nor in that round's undo copy, and the seconds."""
    target = root / rel
    before = target.read_bytes()
    patch = Patch((FileEdit(rel, BEFORE, AFTER),))
    spans = []
    for _ in range(15):  # how long one apply takes here, now
        target.write_bytes(before)
        t0 = time.perf_counter()
        P.apply_patch(root, patch)
        spans.append(time.perf_counter() - t0)
    span = statistics.median(spans)
    outcomes: Counter = Counter()
    lost: list[int] = []
    rng = random.Random(9)
    started = time.perf_counter()
    for i in range(iterations):
        target.write_bytes(before)
        line = f"# the user's line {i}\n".encode()
        go, when = threading.Event(), []
        delay = rng.uniform(0, 1.3 * span)

        def write(line=line, delay=delay, go=go, when=when) -> None:
            go.wait()
            time.sleep(delay)
            save(target, line, before)
            when.append(time.perf_counter())

        writer = threading.Thread(target=write)
        writer.start()
        t0 = time.perf_counter()
        go.set()
        try:
            record = P.apply_patch(root, patch)
        except ApplyError as exc:
            assert "changed since the fix was computed" in str(exc)
            record = None
        t1 = time.perf_counter()
        writer.join()
        outcomes["during apply" if t0 < when[0] < t1 else "outside apply"] += 1
        final = target.read_bytes()
        copy = (record / "0.before").read_bytes() if record is not None else b""
        if line in final:
            outcomes["refused" if record is None else "applied, then written"] += 1
            if record is not None:  # the undo copy is exactly what the exchange displaced
                assert copy in (before, before + line), i
        elif record is not None and line in copy:
            outcomes["in the undo copy"] += 1
        else:
            lost.append(i)
    return outcomes, lost, time.perf_counter() - started


@pytest.mark.slow
@pytest.mark.parametrize("writer", [_in_place, _rename_over], ids=["in-place", "rename-over"])
def test_racing_writes_against_apply_lose_none(tmp_path, outside, writer):
    """1,000 saves, each timed to land somewhere in an apply: every line survives, in the project
    (or, for the rare in-place save whose open() straddled the exchange, in the undo copy).

    The old check-then-rename code lost the line whenever the save landed between the check and
    the rename: 218 (in place) and 301 (rename over) of 1,000 here."""
    root = _project(tmp_path, {"pkg/mod.py": BEFORE})
    outcomes, lost, seconds = _race(root, "pkg/mod.py", writer, 1000)
    assert not lost, f"lost {len(lost)} of 1000 lines ({dict(outcomes)}, {seconds:.1f} s)"
    if writer is _rename_over:  # a rename is atomic with the exchange: it is before it or after it
        assert outcomes["in the undo copy"] == 0, outcomes
    else:  # the documented window: an open() preempted across the exchange writes the old file
        assert outcomes["in the undo copy"] <= 10, outcomes
    assert outcomes["refused"] and outcomes["applied, then written"], outcomes
    assert outcomes["during apply"] >= 100, f"too few real races to mean anything: {dict(outcomes)}"
    assert not _temps(root)


@pytest.mark.slow
def test_writes_through_an_open_handle_are_kept_in_the_undo_copy(tmp_path, outside):
    """The documented window: a write through a descriptor opened before the exchange that lands
    after the comparison goes into the displaced file, i.e. the undo copy; nothing is lost."""
    root = _project(tmp_path, {"pkg/mod.py": BEFORE})
    outcomes, lost, seconds = _race(root, "pkg/mod.py", _append, 1000)
    assert not lost, f"lost {len(lost)} of 1000 lines ({dict(outcomes)}, {seconds:.1f} s)"
    assert not _temps(root)


# -- (2) the undo copy is the displaced file ------------------------------------------------------

def test_undo_copy_is_exactly_the_displaced_file(tmp_path, outside):
    """The undo copy is the very file the fix displaced (same inode, mode, bytes): a write through
    a handle opened before the apply and flushed after it is in the undo copy, and undo restores it."""
    root = _project(tmp_path, {"pkg/mod.py": BEFORE})
    target = root / "pkg/mod.py"
    target.chmod(0o751)
    original = os.stat(target)
    handle = open(target, "ab")  # e.g. a tool that keeps the file open
    record = P.apply_patch(root, Patch((FileEdit("pkg/mod.py", BEFORE, AFTER),)))
    handle.write(b"# written after the apply, through the old handle\n")
    handle.close()
    copy = record / "0.before"
    assert os.path.samestat(os.stat(copy), original)
    assert copy.read_text() == BEFORE + "# written after the apply, through the old handle\n"
    assert target.read_text() == AFTER and os.stat(target).st_mode == original.st_mode
    P.undo_last(root, force=True)
    assert target.read_text() == BEFORE + "# written after the apply, through the old handle\n"
    assert not _temps(root)


# -- (3) kill -9 at any moment ---------------------------------------------------------------------

N_FILES = 6


def _big_project(tmp_path: Path) -> tuple[Path, Patch, dict[str, bytes], dict[str, bytes]]:
    files = {f"pkg/m{i}.py": BEFORE * 40 + f"# module {i}\n" for i in range(N_FILES)}
    root = _project(tmp_path, files)
    patch = Patch(tuple(FileEdit(rel, text, text.replace("return x > 7\n", "return x >= 7\n"))
                        for rel, text in files.items()))
    return (root, patch, {rel: text.encode() for rel, text in files.items()},
            {e.path: e.after.encode() for e in patch.edits})


_STEPS = ("write_json", "write_temp", "exchange_files", "swap_in", "swap_out", "_move_into", "unlink_if_present",
          "_commit", "_discard")


def _in_child(work, kill_at: int | None = None, kill_after: tuple[str, int] | None = None) -> int:
    """Run ``work`` in a forked child.  With ``kill_at`` the child SIGKILLs itself at that step
    (the steps: the entry and the exit of each internal function in _STEPS); with ``kill_after``
    (name, n), as the n-th call of that function returns.  Returns the child's step count when it
    ran to the end, -1 when it was killed."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        try:
            os.close(r)
            count, calls = [0], Counter()

            def step() -> None:
                count[0] += 1
                if count[0] == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)

            for name in _STEPS:
                real = _helper(name)

                def wrapped(*a, _real=real, _name=name, **kw):
                    step()
                    try:
                        return _real(*a, **kw)
                    finally:
                        step()
                        calls[_name] += 1
                        if kill_after == (_name, calls[_name]):
                            os.kill(os.getpid(), signal.SIGKILL)

                _replace(name, wrapped)
            work()
            os.write(w, count[0].to_bytes(4, "little"))
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        got = fh.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        assert os.WTERMSIG(status) == signal.SIGKILL
        return -1
    assert len(got) == 4, "the child failed before finishing its work"
    return int.from_bytes(got, "little")


def _in_child_killed_after(work, seconds: float) -> None:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.write(w, b"g")
            work()
        finally:
            os._exit(0)
    os.close(w)
    os.read(r, 1)
    time.sleep(seconds)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    os.close(r)


def _state(root: Path, before: dict[str, bytes], after: dict[str, bytes]) -> str:
    now = {rel: (root / rel).read_bytes() for rel in before}
    if now == before:
        return "before"
    if now == after:
        return "after"
    raise AssertionError(f"partial state: {[rel for rel in now if now[rel] != before[rel]]} changed")


def _check_after_crash(root: Path, before: dict[str, bytes], after: dict[str, bytes]) -> str:
    """What the next run must find: no temp, whole files, a record only for an applied fix."""
    P.recover(root)
    assert not _temps(root), _temps(root)
    undo = _undo_dir(root)
    assert not list(undo.glob("*.journal.json*"))
    for record in (p for p in undo.iterdir() if p.is_dir()):
        assert {"manifest.json", "manifest.undone.json"} & set(os.listdir(record)), record
    state = _state(root, before, after)
    if state == "after":
        [manifest] = _manifests(root)
        copies = {f"pkg/m{i}.py": (manifest.parent / f"{i}.before").read_bytes() for i in range(N_FILES)}
        assert copies == before
    else:
        assert not _manifests(root)
    return state


def _reset(root: Path, before: dict[str, bytes], after: dict[str, bytes], state: str) -> None:
    if state == "after":
        P.undo_last(root)
    else:
        with pytest.raises(ApplyError, match="nothing to undo"):
            P.undo_last(root)
    assert _state(root, before, after) == "before" and not _manifests(root)


@pytest.mark.slow
def test_kill_9_at_every_step_of_apply_and_undo_leaves_whole_files(tmp_path, outside):
    """The child applies (or undoes) a six-file patch and is killed at each step in turn: the next
    run finds every file before or after (never a mix), no temp in the project, and an undo record
    exactly when the fix is in place; undo then restores it or says there is nothing to undo."""
    root, patch, before, after = _big_project(tmp_path)
    steps = _in_child(lambda: P.apply_patch(root, patch))
    assert steps > 4 * N_FILES
    _reset(root, before, after, _check_after_crash(root, before, after))
    seen = Counter()
    for k in range(1, steps + 1):
        assert _in_child(lambda: P.apply_patch(root, patch), kill_at=k) == -1
        state = _check_after_crash(root, before, after)
        seen[state] += 1
        _reset(root, before, after, state)
    assert seen["before"] and seen["after"], seen
    # Undo killed at each step: the fix stays whole, or is undone whole.
    P.apply_patch(root, patch)
    steps = _in_child(lambda: P.undo_last(root))
    undone = Counter()
    for k in range(1, steps + 1):
        P.apply_patch(root, patch)
        assert _in_child(lambda: P.undo_last(root), kill_at=k) == -1
        P.recover(root)
        assert not _temps(root)
        state = _state(root, before, after)
        undone[state] += 1
        assert bool(_manifests(root)) == (state == "after")
        if state == "after":
            P.undo_last(root)
    assert undone["before"] and undone["after"], undone


@pytest.mark.slow
def test_kill_9_at_random_moments_of_apply(tmp_path, outside):
    """Killed at random instants (also inside a write or a rename): the same guarantees."""
    root, patch, before, after = _big_project(tmp_path)
    spans = []
    for _ in range(3):
        t0 = time.perf_counter()
        _in_child(lambda: P.apply_patch(root, patch))
        spans.append(time.perf_counter() - t0)
        P.undo_last(root)
    span = statistics.median(spans)
    rng = random.Random(5)
    seen = Counter()
    for _ in range(120):
        _in_child_killed_after(lambda: P.apply_patch(root, patch), rng.uniform(0, span))
        state = _check_after_crash(root, before, after)
        seen[state] += 1
        _reset(root, before, after, state)
    assert seen["before"] and seen["after"], seen


def test_kill_9_then_the_command_line_undo(tmp_path, outside):
    """`frognano undo` after a killed --apply: rolled back -> nothing to undo; the fix wholly in
    place -> the record is completed and undo restores it."""
    root, patch, before, after = _big_project(tmp_path)
    env = {**os.environ}

    def undo() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "frognano", "undo", str(root)], capture_output=True,
                              text=True, env=env, timeout=120)

    # killed as the third file went in: half the files were swapped
    assert _in_child(lambda: P.apply_patch(root, patch), kill_after=("swap_in", 3)) == -1
    assert _temps(root)  # the crash left them: the next run removes them
    proc = undo()
    assert proc.returncode == 2 and "nothing to undo" in proc.stderr, proc.stderr
    assert "interrupted fix --apply was rolled back" in proc.stderr
    assert _state(root, before, after) == "before" and not _temps(root)
    # killed after the last file went in and was checked, before the record was complete
    assert _in_child(lambda: P.apply_patch(root, patch), kill_after=("swap_in", N_FILES)) == -1
    assert _state(root, before, after) == "after" and not _manifests(root)
    proc = undo()
    assert proc.returncode == 0, proc.stderr
    assert _state(root, before, after) == "before" and not _temps(root)


# -- (4) multi-file: all or nothing ----------------------------------------------------------------

def _save_b_while_encoding(monkeypatch, root, save):
    """Save ``b.py`` once the fix's second file is being encoded: after the early content check,
    before any swap.  Returns the real encoder."""
    encode = P.encode_source
    calls = []

    def encode_then_save(text, like=None):
        calls.append(like)
        if len(calls) == 2:
            save(root / "b.py", b"# saved meanwhile\n", BEFORE.encode())
        return encode(text, like=like)

    monkeypatch.setattr(P, "encode_source", encode_then_save)
    return encode


@pytest.mark.parametrize("save", [_in_place, _rename_over], ids=["in-place", "rename-over"])
def test_second_file_changed_mid_apply_puts_the_first_back(tmp_path, outside, monkeypatch, save):
    """The second file is saved after the early check (while the fix is being encoded): the first
    file, already exchanged, is exchanged back -- the very same file, untouched -- and nothing is
    written.  Old code wrote both and lost the save."""
    root = _project(tmp_path, {"a.py": BEFORE, "b.py": BEFORE})
    first = os.stat(root / "a.py")
    _save_b_while_encoding(monkeypatch, root, save)
    patch = Patch((FileEdit("a.py", BEFORE, AFTER), FileEdit("b.py", BEFORE, AFTER)))
    with pytest.raises(ApplyError, match=r"^b\.py changed since the fix was computed; nothing was written"):
        P.apply_patch(root, patch)
    assert (root / "a.py").read_text() == BEFORE and os.path.samestat(os.stat(root / "a.py"), first)
    assert (root / "b.py").read_text() == BEFORE + "# saved meanwhile\n"
    assert not _temps(root) and not _manifests(root)
    assert not [p for p in _undo_dir(root).iterdir() if p.name != ".lock"]
    with pytest.raises(ApplyError, match="nothing to undo"):
        P.undo_last(root)


# -- (5) the fallback where the filesystem cannot exchange -----------------------------------------

@pytest.fixture
def no_exchange(monkeypatch):
    def einval(a, b):
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL), str(a))

    _replace("exchange_files", einval, monkeypatch.setattr)


def test_fallback_without_exchange_applies_and_undoes(tmp_path, outside, no_exchange):
    root = _project(tmp_path, {"a.py": BEFORE, "b.py": BEFORE})
    first = os.stat(root / "a.py")
    patch = Patch((FileEdit("a.py", BEFORE, AFTER), FileEdit("b.py", BEFORE, AFTER)))
    record = P.apply_patch(root, patch)
    assert (root / "a.py").read_text() == AFTER and (root / "b.py").read_text() == AFTER
    assert os.path.samestat(os.stat(record / "0.before"), first)  # hard-linked aside: the same file
    assert not _temps(root)
    P.undo_last(root)
    assert (root / "a.py").read_text() == BEFORE and (root / "b.py").read_text() == BEFORE
    assert not _temps(root)


@pytest.mark.parametrize("save", [_in_place, _rename_over], ids=["in-place", "rename-over"])
def test_fallback_without_exchange_still_refuses_changed_files(tmp_path, outside, monkeypatch,
                                                               no_exchange, save):
    root = _project(tmp_path, {"a.py": BEFORE, "b.py": BEFORE})
    _save_b_while_encoding(monkeypatch, root, save)
    patch = Patch((FileEdit("a.py", BEFORE, AFTER), FileEdit("b.py", BEFORE, AFTER)))
    with pytest.raises(ApplyError, match=r"^b\.py changed since the fix was computed; nothing was written"):
        P.apply_patch(root, patch)
    assert (root / "a.py").read_text() == BEFORE
    assert (root / "b.py").read_text() == BEFORE + "# saved meanwhile\n"
    assert not _temps(root) and not _manifests(root)


@pytest.mark.slow
def test_fallback_races_lose_nothing_outside_its_documented_window(tmp_path, outside, no_exchange):
    """In-place saves racing the fallback: each line is in the project or the undo copy."""
    root = _project(tmp_path, {"pkg/mod.py": BEFORE})
    outcomes, lost, seconds = _race(root, "pkg/mod.py", _in_place, 300)
    assert not lost, f"lost {len(lost)} of 300 lines ({dict(outcomes)}, {seconds:.1f} s)"


# -- (6) watch --apply goes the same way -----------------------------------------------------------

def test_watch_apply_uses_the_exchange_and_skips_a_file_saved_meanwhile(tmp_path, outside, monkeypatch):
    from rich.console import Console

    import frognano.cli.watch as W
    from frognano.config import Settings
    from frognano.repair.engine import FixReport
    from frognano.repair.patch import Fix, Verification
    from frognano.sandbox.workspace import Workspace

    assert W.apply_patch is P.apply_patch
    root = _project(tmp_path, {"a.py": BEFORE, "b.py": BEFORE})
    out = io.StringIO()
    console = Console(file=out, width=200, highlight=False)
    watcher = W._Watcher(Workspace(root), Settings(), apply=True, console=console, errors=console,
                         debounce=0.3)
    patch = Patch((FileEdit("a.py", BEFORE, AFTER), FileEdit("b.py", BEFORE, AFTER)))
    exchanged = []
    exchange = _helper("exchange_files")

    def counting(a, b):
        exchanged.append(Path(b).name)
        return exchange(a, b)

    _replace("exchange_files", counting, monkeypatch.setattr)
    encode = _save_b_while_encoding(monkeypatch, root, _rename_over)
    report = FixReport(status="fixed", fix=Fix(patch, Verification(["t"], 1)))
    assert watcher._apply(report) is False  # run again on the new state
    assert "skipped: b.py changed while the fix was computed" in out.getvalue()
    assert (root / "a.py").read_text() == BEFORE and (root / "b.py").read_text().endswith("meanwhile\n")
    assert "b.py" in watcher._pending and not _temps(root) and not _manifests(root)
    assert exchanged[:2] == ["a.py", "b.py"]  # both went through the exchange, a.py came back

    monkeypatch.setattr(P, "encode_source", encode)
    (root / "b.py").write_text(BEFORE)
    report = FixReport(status="fixed", fix=Fix(patch, Verification(["t"], 1)))
    assert watcher._apply(report) is True and report.applied
    assert (root / "a.py").read_text() == AFTER and (root / "b.py").read_text() == AFTER
    assert Path(report.undo, "manifest.json").is_file() and not _temps(root)


# -- odds and ends ----------------------------------------------------------------------------------

def test_undo_copy_across_filesystems_is_a_flushed_copy(tmp_path, outside, monkeypatch):
    """When the cache is on another filesystem the displaced file cannot be renamed into the
    record: it is copied (and flushed) there, then removed from the project."""
    root = _project(tmp_path, {"pkg/mod.py": BEFORE})
    replace = os.replace

    def no_cross_device_rename(src, dst, **kw):
        if X.TEMP_NAME.match(Path(src).name) and Path(dst).parent.parent == _undo_dir(root):
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV), str(src))
        return replace(src, dst, **kw)

    monkeypatch.setattr(os, "replace", no_cross_device_rename)
    record = P.apply_patch(root, Patch((FileEdit("pkg/mod.py", BEFORE, AFTER),)))
    assert (record / "0.before").read_text() == BEFORE and (root / "pkg/mod.py").read_text() == AFTER
    assert not _temps(root) and not list(record.glob("*.part"))
    P.undo_last(root)
    assert (root / "pkg/mod.py").read_text() == BEFORE and not _temps(root)


def test_only_stale_temps_of_ours_are_swept(tmp_path, outside):
    """The next apply removes temps a killed apply left (dead pid, or older than a minute) and
    nothing else: not a live process's fresh temp, not a user's file that merely looks alike."""
    root = _project(tmp_path, {"pkg/mod.py": BEFORE})
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    dead_pid = int(dead.stdout)
    pkg = root / "pkg"
    stale = [pkg / f".mod.py.{dead_pid}.0badc0de.frognano",
             pkg / f".other.py.{os.getpid()}.00000001.frognano"]  # made an hour old below
    kept = [pkg / f".mod.py.{os.getpid()}.0000beef.frognano",  # a live process, just now
            pkg / "notes.frognano", pkg / ".mod.py.frognano", pkg / f".mod.py.{dead_pid}.XYZ.frognano"]
    for p in stale + kept:
        p.write_text("x")
    old = time.time() - 3600
    os.utime(stale[1], (old, old))
    P.apply_patch(root, Patch((FileEdit("pkg/mod.py", BEFORE, AFTER),)))
    assert not any(p.exists() for p in stale)
    assert all(p.read_text() == "x" for p in kept)
