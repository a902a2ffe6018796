"""Lifecycles that end badly: resuming a damaged or tampered training run, and the language
server's shutdown and exit, and ``watch --apply`` on a project it cannot write.

Each case ends in one named error line and the README's exit code, never a traceback, and
loses nothing: a refused resume leaves the run as it was, a refused apply leaves the user's
file as it was.  Everything runs for real: one tiny-ci training run (the session's, copied per
case), ``frognano serve`` over pipes, ``frognano watch --apply`` in a subprocess.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import sigint_default

from ..conftest import write_project
from .test_server import RawServer, frame

pytestmark = pytest.mark.timeout(600)


def _frognano(*args: str, cwd: Path, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "frognano", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, **kw)


def _files(root: Path, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """sha256 of every file under ``root`` (symlinks by their target), but the folders in ``skip``."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if rel.split("/")[0] in skip or "__pycache__" in rel:
            continue
        if p.is_symlink():
            out[rel] = "-> " + os.readlink(p)
        elif p.is_file():
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


# -- row 15: train --resume on a tampered run directory -----------------------------------------

CHECKPOINT = "checkpoints/step-000003"


@pytest.fixture
def finished(trained) -> Path:
    """The session's finished tiny-ci run (3 steps; ``latest`` names step-000003); copy it to change it."""
    run, done = trained
    assert done.returncode == 0, done.stderr[-3000:]
    assert (run / "latest").read_text() == "step-000003"
    return run


def _outside(run: Path) -> Path:
    """A whole copy of the last checkpoint outside the run: what a tampered pointer would read."""
    out = run.parent / "elsewhere" / "step-000003"
    shutil.copytree(run / CHECKPOINT, out)
    return out


def _cut(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def _edit_json(path: Path, **fields) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}))


def _point_latest_through_a_symlink(run: Path) -> None:
    _outside(run)
    target = run.parent / "elsewhere" / "latest"
    target.write_text("step-000003")
    (run / "latest").unlink()
    (run / "latest").symlink_to(target)


def _checkpoint_as_a_symlink(run: Path) -> None:
    out = _outside(run)
    shutil.rmtree(run / CHECKPOINT)
    (run / CHECKPOINT).symlink_to(out)


def _adapter_of_another_shape(run: Path) -> None:
    """A whole, valid safetensors file whose tensors have other shapes (another base model)."""
    import torch
    from safetensors.torch import load_file, save_file

    path = run / CHECKPOINT / "adapter" / "adapter_model.safetensors"
    weights = load_file(str(path))
    save_file({k: torch.zeros(*(d + 1 for d in v.shape)) for k, v in weights.items()}, str(path))


# name -> (tampering, the file the error line must name)
TAMPERINGS: dict[str, tuple[Callable[[Path], object], str]] = {
    "latest-absolute": (lambda r: (r / "latest").write_text(str(_outside(r))), "latest"),
    "latest-dotdot": (lambda r: (_outside(r), (r / "latest").write_text("../../elsewhere/step-000003")), "latest"),
    "latest-symlink": (_point_latest_through_a_symlink, "latest"),
    "checkpoint-symlink": (_checkpoint_as_a_symlink, CHECKPOINT),
    "latest-missing-checkpoint": (lambda r: (r / "latest").write_text("step-000009"), "latest"),
    "latest-garbage": (lambda r: (r / "latest").write_bytes(b"\xff\x00garbage\n"), "latest"),
    "state-truncated": (lambda r: _cut(r / CHECKPOINT / "state.json"), f"{CHECKPOINT}/state.json"),
    "state-a-list": (lambda r: (r / CHECKPOINT / "state.json").write_text("[1, 2]"), f"{CHECKPOINT}/state.json"),
    "state-missing-keys": (lambda r: (r / CHECKPOINT / "state.json").write_text('{"step": 3}'),
                           f"{CHECKPOINT}/state.json"),
    "state-wrong-types": (lambda r: _edit_json(r / CHECKPOINT / "state.json", step="three"),
                          f"{CHECKPOINT}/state.json"),
    "state-bad-rng": (lambda r: _edit_json(r / CHECKPOINT / "state.json", rng=[3, [1, 2], None]),
                      f"{CHECKPOINT}/state.json"),
    "state-bad-cursor": (lambda r: _edit_json(r / CHECKPOINT / "state.json", pool={"rounds": 2, "cursor": ["a"]}),
                         f"{CHECKPOINT}/state.json"),
    "state-deleted": (lambda r: (r / CHECKPOINT / "state.json").unlink(), f"{CHECKPOINT}/state.json"),
    "sampler-truncated": (lambda r: _cut(r / CHECKPOINT / "sampler.json"), f"{CHECKPOINT}/sampler.json"),
    "sampler-wrong-kind": (lambda r: _edit_json(r / CHECKPOINT / "sampler.json", kind="uniform"),
                           f"{CHECKPOINT}/sampler.json"),
    "sampler-bad-families": (lambda r: _edit_json(r / CHECKPOINT / "sampler.json", families=[{"x": 1}]),
                             f"{CHECKPOINT}/sampler.json"),
    "rng-garbage": (lambda r: (r / CHECKPOINT / "rng.json").write_text('{"torch": "x"}'), f"{CHECKPOINT}/rng.json"),
    "adapter-truncated": (lambda r: _cut(r / CHECKPOINT / "adapter" / "adapter_model.safetensors"),
                          f"{CHECKPOINT}/adapter/adapter_model.safetensors"),
    "adapter-deleted": (lambda r: (r / CHECKPOINT / "adapter" / "adapter_model.safetensors").unlink(),
                        f"{CHECKPOINT}/adapter/adapter_model.safetensors"),
    "adapter-other-shape": (_adapter_of_another_shape, f"{CHECKPOINT}/adapter/adapter_model.safetensors"),
    "optimizer-truncated": (lambda r: _cut(r / CHECKPOINT / "optimizer.pt"), f"{CHECKPOINT}/optimizer.pt"),
    "config-truncated": (lambda r: _cut(r / "config.json"), "config.json"),
    "config-a-list": (lambda r: (r / "config.json").write_text("[]"), "config.json"),
    "config-wrong-types": (lambda r: _edit_json(r / "config.json", tiny=5), "config.json"),
    "pool-garbage-line": (lambda r: (r / "pool" / "round-000.jsonl").write_text(
        "garbage\n" + (r / "pool" / "round-000.jsonl").read_text()), "pool/round-000.jsonl"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(TAMPERINGS))
def test_a_tampered_run_refuses_to_resume_with_one_line(finished, tmp_path, name):
    tamper, culprit = TAMPERINGS[name]
    run = tmp_path / "run"
    shutil.copytree(finished, run, symlinks=True)
    tamper(run)
    # What a resume may add to before it reaches the checkpoint: the held-out and pool task
    # stores top themselves up, and the event files start a new one.
    kept = ("tensorboard", "heldout.jsonl", "pool", "repos")
    before = _files(run, skip=kept)
    outside = _files(run.parent / "elsewhere") if (run.parent / "elsewhere").exists() else {}
    done = _frognano("train", "--preset", "tiny-ci", "-o", str(run), "--resume", cwd=tmp_path)
    assert done.returncode == 2, f"exit {done.returncode}\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr[-3000:]
    assert str(run / culprit) in errors[0], errors[0]
    # Nothing lost: the run (and what the tampering put outside it) as it was.
    assert _files(run, skip=kept) == before
    if outside:
        assert _files(run.parent / "elsewhere") == outside


@pytest.mark.slow
def test_garbage_metric_rows_are_dropped_and_the_run_resumes(finished, tmp_path):
    """A sound recovery: metric rows that are not a step's object go, as a cut-off row does."""
    run = tmp_path / "run"
    shutil.copytree(finished, run, symlinks=True)
    metrics = run / "metrics.jsonl"
    rows = metrics.read_text()
    metrics.write_text(rows + '[1]\n"x"\n{"step": "x"}\n')
    done = _frognano("train", "--preset", "tiny-ci", "-o", str(run), "--resume", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert metrics.read_text() == rows


def test_a_safetensors_header_is_checked_against_the_file_size(tmp_path):
    from frognano.errors import UsageError
    from frognano.training.resume import check_safetensors

    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    whole = struct.pack("<Q", len(header)) + header + b"\0" * 8
    path = tmp_path / "a.safetensors"
    path.write_bytes(whole)
    check_safetensors(path, "the adapter")
    for damaged in (whole[:-1], whole + b"\0", whole[:5], struct.pack("<Q", 2**60) + header, b""):
        path.write_bytes(damaged)
        with pytest.raises(UsageError, match="damaged"):
            check_safetensors(path, "the adapter")


# -- row 16: the language server's shutdown and exit ---------------------------------------------

REQUEST_CANCELLED, REQUEST_FAILED, INTERNAL_ERROR = -32800, -32803, -32603


class SilentClient(RawServer):
    """A client that never answers the server's own requests (a busy or slow editor): the
    commands waiting on them stay in flight."""

    def send(self, data: bytes) -> None:
        body = json.loads(data.split(b"\r\n\r\n", 1)[1]) if b"\r\n\r\n" in data else {}
        if isinstance(body, dict) and "method" not in body and isinstance(body.get("id"), str):
            return  # an answer to the server's request (its ids are UUID strings; ours are integers)
        super().send(data)


def _exit(srv: RawServer) -> tuple[int, float]:
    started = time.monotonic()
    srv.send(frame({"jsonrpc": "2.0", "method": "exit"}))
    try:
        code = srv.proc.wait(30)
    except subprocess.TimeoutExpired:
        code = -1
    return code, time.monotonic() - started


def test_shutdown_answers_every_request_in_flight_then_exit_is_0(tmp_path):
    record = tmp_path / "episode.json"
    record.write_text("{}")
    srv = SilentClient(tmp_path)
    try:
        srv.initialize()
        # Each waits for the editor to show the record (window/showDocument), which never answers.
        pending = [srv.request("workspace/executeCommand", {"command": "frognano.showEpisode",
                                                            "arguments": [str(record)]}) for _ in range(3)]
        time.sleep(0.5)
        answer = srv.response(srv.request("shutdown"), 30)
        assert answer.get("result", "missing") is None and "error" not in answer, answer
        for msg_id in pending:
            got = srv.response(msg_id, 15)
            assert "result" in got or got["error"]["code"] in (REQUEST_CANCELLED, REQUEST_FAILED), got
        assert not srv.errors(INTERNAL_ERROR), srv.errors(INTERNAL_ERROR)
        code, seconds = _exit(srv)
        assert code == 0 and seconds < 2, (code, seconds, srv.stderr()[-3000:])
        assert "Traceback" not in srv.stderr(), srv.stderr()[-3000:]
    finally:
        srv.close()


SLOW_P = {
    "pyproject.toml": """
        [project]
        name = "p"
        version = "0"
    """,
    "m.py": """
        def is_adult(age):
            return age > 18
    """,
    "test_m.py": """
        import time

        from m import is_adult


        def test_adult():
            assert is_adult(18)


        def test_child():
            time.sleep(60)
            assert not is_adult(10)
    """,
}


def _serving_a_fix(root: Path) -> RawServer:
    """``serve`` on the project at ``root`` with a fix job running (its baseline is in a test that
    sleeps a minute)."""
    srv = RawServer(root)
    u = root.as_uri()
    answer = srv.response(srv.request("initialize", {"processId": None, "rootUri": u, "capabilities": {},
                                                     "workspaceFolders": [{"uri": u, "name": root.name}]}), 60)
    assert "result" in answer, answer
    srv.notify("initialized", {})
    srv.request("workspace/executeCommand", {"command": "frognano.fix", "arguments": []})
    deadline = time.monotonic() + 60
    while not any(m.get("method") == "frognano/status" and (m.get("params") or {}).get("state") == "fixing"
                  for m in list(srv.received)):
        assert time.monotonic() < deadline, f"the fix never started\n{srv.stderr()[-3000:]}"
        time.sleep(0.05)
    time.sleep(1.0)  # into the baseline run
    return srv


@pytest.mark.slow
def test_exit_without_shutdown_exits_1_promptly(tmp_path, monkeypatch):
    monkeypatch.setenv("FROGNANO_CACHE_DIR", str(tmp_path / "cache"))
    root = write_project(tmp_path / "p", SLOW_P)
    srv = _serving_a_fix(root)
    try:
        code, seconds = _exit(srv)
        assert code == 1, (code, srv.stderr()[-3000:])  # LSP: exit without shutdown is 1
        assert seconds < 2, seconds
        assert "Traceback" not in srv.stderr(), srv.stderr()[-3000:]
    finally:
        srv.close()


@pytest.mark.slow
def test_exit_after_shutdown_with_a_fix_running_exits_0_promptly(tmp_path, monkeypatch):
    monkeypatch.setenv("FROGNANO_CACHE_DIR", str(tmp_path / "cache"))
    root = write_project(tmp_path / "p", SLOW_P)
    srv = _serving_a_fix(root)
    try:
        answer = srv.response(srv.request("shutdown"), 30)
        assert answer.get("result", "missing") is None and "error" not in answer, answer
        code, seconds = _exit(srv)
        assert code == 0 and seconds < 2, (code, seconds)
        assert "Traceback" not in srv.stderr(), srv.stderr()[-3000:]
    finally:
        srv.close()


# -- row 16: watch --apply on a read-only project ------------------------------------------------

P = {
    "pyproject.toml": SLOW_P["pyproject.toml"],
    "m.py": SLOW_P["m.py"],
    "test_m.py": """
        from m import is_adult


        def test_adult():
            assert is_adult(18)


        def test_child():
            assert not is_adult(10)
    """,
}

# A read-only bind mount of the project in a mount namespace of its own: read-only for root too
# (CI runs as root, where chmod stops nothing).
READ_ONLY = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'


def _read_only_works(tmp_path: Path) -> bool:
    probe = tmp_path / "probe"
    probe.mkdir()
    try:
        done = subprocess.run(["unshare", "-rm", "sh", "-c", READ_ONLY, str(probe), "touch", str(probe / "x")],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode != 0 and "Read-only" in done.stderr and not (probe / "x").exists()


@pytest.mark.slow
def test_watch_apply_on_a_read_only_project_says_so_and_goes_on(tmp_path):
    if shutil.which("unshare") is None or not _read_only_works(tmp_path):
        pytest.skip("no unprivileged mount namespace here for a read-only project")
    project = write_project(tmp_path / "P", P)
    before = _files(project)
    out = tmp_path / "out.txt"
    cache = tmp_path / "cache"
    env = {**os.environ, "FROGNANO_CACHE_DIR": str(cache)}
    with open(out, "wb") as fh:
        proc = subprocess.Popen(["unshare", "-rm", "sh", "-c", READ_ONLY, str(project),
                                 sys.executable, "-m", "frognano", "watch", str(project), "--apply"],
                                stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                preexec_fn=sigint_default)
    try:
        deadline = time.monotonic() + 120
        while "Verified fix" not in out.read_text(errors="replace"):
            assert proc.poll() is None and time.monotonic() < deadline, out.read_text(errors="replace")
            time.sleep(0.05)
        time.sleep(0.5)
        assert proc.poll() is None, "the watch ended at the refused write"
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = out.read_text(errors="replace")
    assert "Traceback" not in text, text
    errors = [line for line in text.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "read-only" in errors[0] and "nothing was written" in errors[0], text
    assert _files(project) == before  # the user's files as they were
    assert not list(cache.rglob("*.journal.json")), "a journal was left for the next run to trip over"
