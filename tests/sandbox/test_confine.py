"""frognano_confine, the stdlib-only confinement the worker applies: each case in a fresh
interpreter, since confinement is for good."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from frognano.sandbox._worker import frognano_confine
from frognano.sandbox.process import WORKER_DIR

ABI, _ = frognano_confine.landlock_abi()
landlock = pytest.mark.skipif(not ABI, reason="no Landlock here")


def in_child(code: str, *args: str) -> dict:
    """Run ``code`` (which prints one JSON object last) in a fresh interpreter."""
    env = {**os.environ, "PYTHONPATH": str(WORKER_DIR)}
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


ATTEMPTS = """
    import errno, json, os, socket, sys
    import frognano_confine as c

    inside, outside, port, abi = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    how, why = c._landlock(abi, [inside]) if abi else c.confine([inside])
    c.watch_denials([inside])
    os.environ["PYTEST_CURRENT_TEST"] = "tests/test_x.py::test_y (call)"

    def attempt(f):
        try:
            f()
            return "ok"
        except OSError as exc:
            return errno.errorcode[exc.errno]

    os.mkdir(os.path.join(inside, "sub"))
    print(json.dumps({
        "how": how,
        "write_inside": attempt(lambda: open(os.path.join(inside, "a.txt"), "w").close()),
        "write_outside": attempt(lambda: open(os.path.join(outside, "a.txt"), "w").close()),
        "truncate_outside": attempt(lambda: os.truncate(os.path.join(outside, "keep.txt"), 0)),
        "dev_null": attempt(lambda: open("/dev/null", "w").write("x")),
        "rename_across": attempt(lambda: os.rename(os.path.join(inside, "a.txt"),
                                                   os.path.join(inside, "sub", "a.txt"))),
        "connect": attempt(lambda: socket.create_connection(("127.0.0.1", port), timeout=2).close()),
        "udp": attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", ("127.0.0.1", port))),
        "denied": c.denied,
    }))
"""


@pytest.fixture
def dirs(tmp_path):
    inside, outside = tmp_path / "inside", tmp_path / "outside"
    inside.mkdir()
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield str(inside), str(outside), str(server.getsockname()[1])
    server.close()


@landlock
def test_confine_at_the_kernels_abi(dirs):
    out = in_child(ATTEMPTS, *dirs, "0")
    namespaces = "mount+net namespaces" in out["how"]  # where the kernel lets us make them
    assert out["how"] == f"landlock ABI {ABI}{' + mount+net namespaces' if namespaces else ''} + seccomp"
    assert out["write_inside"] == out["dev_null"] == out["rename_across"] == "ok"
    # outside: a read-only mount (EROFS) in the run's own namespace, else Landlock (EACCES)
    assert out["write_outside"] == out["truncate_outside"] == ("EROFS" if namespaces else "EACCES")
    assert out["connect"] == "EACCES"  # Landlock refuses it before any route is looked up
    # Landlock has no UDP rights: no route out of the network namespace, else seccomp's EPERM
    assert out["udp"] == ("ENETUNREACH" if namespaces else "EPERM")
    assert out["denied"] == {os.path.join(dirs[1], "a.txt"): "tests/test_x.py::test_y",
                             os.path.join(dirs[1], "keep.txt"): "tests/test_x.py::test_y"}


@landlock
@pytest.mark.parametrize("abi", [1, 2, 3, 4])
def test_rights_an_older_abi_lacks_are_dropped(dirs, abi):
    """Asking for the rights of an older ABI works on a newer kernel, with that ABI's limits."""
    if abi > ABI:
        pytest.skip(f"kernel ABI {ABI}")
    out = in_child(ATTEMPTS, *dirs, str(abi))
    assert out["how"] == f"landlock ABI {abi}" and out["write_outside"] == "EACCES"
    assert out["rename_across"] == ("EXDEV" if abi == 1 else "ok")  # REFER arrived in ABI 2
    assert out["truncate_outside"] == ("ok" if abi < 3 else "EACCES")  # TRUNCATE in ABI 3
    assert out["connect"] == ("ok" if abi < 4 else "EACCES")  # TCP in ABI 4


def test_probe_says_how_or_why_not():
    how, why = frognano_confine.probe()
    assert bool(how) != bool(why)
    if sys.platform.startswith("linux") and ABI:
        assert how == f"landlock ABI {ABI}"


def test_seatbelt_profile_quotes_paths():
    profile = frognano_confine.seatbelt_profile(['/tmp/a "b"\\c'])
    assert '(subpath "' in profile and '\\"b\\"\\\\c' in profile
    assert "(deny file-write*)" in profile and "(deny network-outbound (remote ip))" in profile
    assert profile.count("(") == profile.count(")")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="subreaper is Linux")
def test_subreaper_kills_a_double_forked_daemon():
    out = in_child("""
        import json, os, time
        import frognano_confine as c

        assert c.become_subreaper()
        if os.fork() == 0:  # a test's helper that daemonises
            if os.fork():
                os._exit(0)
            os.setsid()
            time.sleep(300)
            os._exit(0)
        time.sleep(0.2)
        found = c.descendants(os.getpid())
        c.kill_descendants()
        print(json.dumps({"found": found, "left": c.descendants(os.getpid())}))
    """)
    assert len(out["found"]) >= 1 and out["left"] == []


def test_worker_refuses_to_run_when_required_and_confinement_fails(tmp_path):
    """The worker's own check, behind FrogNano's probe: a required sandbox that fails runs nothing."""
    results = tmp_path / "results.jsonl"
    out = in_child("""
        import json, sys
        import frognano_confine, frognano_runsetup

        frognano_confine.confine = lambda writable, **kw: ("", "simulated failure")
        req = {"root": sys.argv[1], "results": sys.argv[2], "sandbox": {"mode": sys.argv[3]}}
        print(json.dumps({"run": frognano_runsetup.confine_run(req)}))
    """, str(tmp_path), str(results), "required")
    assert out == {"run": False}
    record = json.loads(results.read_text())
    assert record == {"kind": "sandbox", "confined": "", "reason": "simulated failure", "refused": True}


def test_runner_refuses_a_run_the_worker_could_not_confine(make_project):
    from frognano.errors import UsageError
    from frognano.sandbox.results import RunResult
    from frognano.sandbox.runner import RunnerConfig, TestRunner
    from frognano.sandbox.workspace import Workspace

    with Workspace(make_project({"tests/test_a.py": "def test_a():\n    pass\n"})) as ws:
        ws.sync()
        unconfined = RunResult(confinement="", unconfined="simulated failure")
        with TestRunner(ws, RunnerConfig(sandbox="required")) as runner:
            if runner.sandbox == "off":
                pytest.skip("no OS sandbox here")
            with pytest.raises(UsageError, match='sandbox = "required".*simulated failure'):
                runner._check_confinement(unconfined)
