"""What Landlock cannot say, covered (issue 25, rows 4-7): metadata of files outside the shadow,
other processes, raw/netlink/UDP sockets, and the environment the tests get.

Each case is a real run through ``TestRunner``: the project's test makes the attack and the
case checks, from outside the run, that nothing happened (mode, owner, times, extended
attributes and content of the files; the other process's nice value and limits; what a local
listener received).  ``test_*_without_namespaces`` repeat the network cases where the kernel
refuses namespaces (simulated by turning them off): seccomp alone must still hold.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import frognano.sandbox.runner as runner_module
from frognano.config import load_settings
from frognano.errors import UsageError
from frognano.sandbox._worker import frognano_confine
from frognano.sandbox.runner import RunnerConfig, TestRunner
from frognano.sandbox.workspace import Workspace

from ..conftest import write_project

CONFINED, WHY_NOT = frognano_confine.probe()
landlock = pytest.mark.skipif(not CONFINED.startswith("landlock"), reason=f"no Landlock here: {WHY_NOT}")
ROOT = os.geteuid() == 0


def _run(root: Path, config: RunnerConfig | None = None, **kw):
    with Workspace(root) as ws:
        ws.sync()
        with TestRunner(ws, config or RunnerConfig()) as runner:
            return runner.run(**kw), runner


def _outcomes(run) -> dict[str, str]:
    return {n.rsplit("::", 1)[1]: t.outcome + (f": {t.message[:300]}" if t.outcome != "passed" else "")
            for n, t in run.tests.items()}


def _meta(path: Path) -> tuple:
    st = os.stat(path)
    return st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns, sorted(os.listxattr(path))


# -- row 4: metadata outside the shadow ---------------------------------------------------------

@landlock
@pytest.mark.parametrize("warm", [True, False])
def test_metadata_of_files_outside_the_shadow_cannot_change(make_project, outside, warm):
    precious = outside.sentinel / "precious.txt"
    root = make_project({"m.py": "def is_adult(age):\n    return age > 18\n"})
    real_m = root / "m.py"
    targets = [str(precious), str(real_m), str(outside.sentinel)]
    other_gid = 12345 if ROOT else next((g for g in os.getgroups() if g != os.getgid()), -1)
    write_project(root, {"tests/test_meta.py": f"""
        import os, pytest

        TARGETS = {targets!r}

        @pytest.mark.parametrize("path", TARGETS)
        def test_chmod(path):
            with pytest.raises(OSError):
                os.chmod(path, 0o600)

        @pytest.mark.parametrize("path", TARGETS)
        def test_utime(path):
            with pytest.raises(OSError):
                os.utime(path, (0, 0))

        @pytest.mark.parametrize("path", TARGETS)
        def test_setxattr(path):
            with pytest.raises(OSError):
                os.setxattr(path, "user.frognano", b"planted")

        @pytest.mark.parametrize("path", TARGETS)
        @pytest.mark.skipif({other_gid} < 0, reason="no second group to chown to")
        def test_chown(path):
            with pytest.raises(OSError):
                os.chown(path, -1, {other_gid})

        def test_inside_the_shadow_and_tmp_path_metadata_still_changes(tmp_path):
            import shutil
            os.chmod("m.py", 0o644)
            os.utime("m.py", (1, 1))
            (tmp_path / "s.sh").write_text("echo hi")
            os.chmod(tmp_path / "s.sh", 0o755)
            shutil.copy2("m.py", tmp_path / "copy.py")  # copies mode and times
            assert os.stat(tmp_path / "copy.py").st_mtime == 1
    """})
    outside.watch(root)
    before = {t: _meta(Path(t)) for t in targets}
    run, runner = _run(root, RunnerConfig(warm=warm))
    after = {t: _meta(Path(t)) for t in targets}
    assert after == before, f"metadata outside the shadow changed: {before} -> {after}"
    outcomes = _outcomes(run)
    assert set(outcomes.values()) <= {"passed", "skipped"}, outcomes
    assert "namespaces" in run.confinement and "seccomp" in run.confinement, run.confinement
    assert runner.denial_note(run) is None  # the denials the tests expected are no failure
    outside.check()


# -- row 5: other processes ---------------------------------------------------------------------

@landlock
@pytest.mark.parametrize("warm", [True, False])
def test_another_process_keeps_its_nice_value_and_limits(make_project, warm):
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        nice = os.getpriority(os.PRIO_PROCESS, victim.pid)
        nofile = resource.prlimit(victim.pid, resource.RLIMIT_NOFILE)
        root = make_project({"tests/test_procs.py": f"""
            import os, resource, pytest

            VICTIM = {victim.pid}

            def test_setpriority_of_another_process():
                with pytest.raises(OSError):
                    os.setpriority(os.PRIO_PROCESS, VICTIM, 19)

            def test_prlimit_of_another_process():
                with pytest.raises(OSError):
                    resource.prlimit(VICTIM, resource.RLIMIT_NOFILE, (16, 16))

            def test_own_process_still_may():
                os.setpriority(os.PRIO_PROCESS, 0, os.getpriority(os.PRIO_PROCESS, 0) + 1)
                soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
                resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 512), hard))
                assert resource.prlimit(VICTIM, resource.RLIMIT_NOFILE)  # reading is harmless
                os.nice(1)

            def test_naming_its_own_pid_is_refused_however_it_runs():  # the same in every strategy
                with pytest.raises(OSError):
                    os.setpriority(os.PRIO_PROCESS, os.getpid(), os.getpriority(os.PRIO_PROCESS, 0))
        """})
        with Workspace(root) as ws:
            ws.sync()
            with TestRunner(ws, RunnerConfig(warm=warm)) as runner:
                whole = runner.run()
                selected = runner.run(list(whole.tests))  # warm: the session's forked runs
        assert os.getpriority(os.PRIO_PROCESS, victim.pid) == nice
        assert resource.prlimit(victim.pid, resource.RLIMIT_NOFILE) == nofile
        for run in (whole, selected):
            assert set(_outcomes(run).values()) == {"passed"}, _outcomes(run)
    finally:
        victim.kill()
        victim.wait()


# -- row 6: raw and netlink sockets -------------------------------------------------------------

NETWORK = """
    import os, socket, struct, pytest

    def _echo_request():
        header = struct.pack("!BBHHH", 8, 0, 0, 0x4652, 1) + b"frognano"
        total = sum(struct.unpack("!%dH" % (len(header) // 2), header))
        total = (total >> 16) + (total & 0xFFFF)
        checksum = ~(total + (total >> 16)) & 0xFFFF
        return header[:2] + struct.pack("!H", checksum) + header[4:]

    def test_raw_icmp_to_localhost():
        with pytest.raises(OSError):
            sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
            sock.sendto(_echo_request(), ("127.0.0.1", 0))

    def _route_dump():
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)  # NETLINK_ROUTE
        # nlmsghdr (RTM_GETROUTE, NLM_F_REQUEST | NLM_F_DUMP) + rtmsg (AF_INET)
        sock.send(struct.pack("=IHHII", 16 + 12, 26, 0x301, 1, 0) + struct.pack("=BBBBBBBBI", 2, 0, 0, 0, 0, 0, 0, 0, 0))
        routes, done = 0, False
        while not done:
            data = sock.recv(65536)
            offset = 0
            while offset + 16 <= len(data):
                length, kind = struct.unpack_from("=IH", data, offset)
                routes += kind == 24  # RTM_NEWROUTE
                done = done or kind == 3  # NLMSG_DONE
                offset += (length + 3) & ~3 or len(data)
        return routes

    def test_netlink_shows_nothing_of_the_host():
        try:
            routes = _route_dump()
        except OSError:
            routes = 0  # no netlink at all (seccomp, without a network namespace)
        assert routes == 0
        try:
            names = {name for _, name in socket.if_nameindex()}
        except OSError:
            names = set()
        assert names <= {"lo"}, names
"""


def _host_has_routes() -> bool:
    with open("/proc/net/route") as fh:
        return len(fh.read().splitlines()) > 1


@landlock
@pytest.mark.skipif(not ROOT, reason="raw sockets need root outside the sandbox too")
@pytest.mark.parametrize("namespaces", [True, False])
def test_raw_icmp_and_netlink_route_dump_are_denied(make_project, monkeypatch, namespaces):
    monkeypatch.setattr(runner_module, "_NAMESPACES", namespaces, raising=False)
    assert _host_has_routes(), "this machine has no routes for the dump to show"
    root = make_project({"tests/test_net.py": NETWORK})
    run, _ = _run(root)
    assert set(_outcomes(run).values()) == {"passed"}, _outcomes(run)
    assert ("namespaces" in run.confinement) == namespaces and "seccomp" in run.confinement


# -- row 7: UDP and the environment -------------------------------------------------------------

@pytest.fixture
def udp_listener():
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(("127.0.0.1", 0))
    server.settimeout(0.3)
    yield server
    server.close()


EXFILTRATE = """
    import os, socket

    def test_send_the_secret():
        secret = os.environ.get("AWS_SECRET_ACCESS_KEY", "nothing to send")
        for payload in (secret.encode(), b"\\x12\\x34\\x01\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00"
                        + bytes([len(secret)]) + secret.encode() + b"\\x00\\x00\\x01\\x00\\x01"):  # DNS-style
            try:
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                    sock.sendto(payload, ("127.0.0.1", {port}))
            except OSError:
                pass
"""


@landlock
@pytest.mark.parametrize("namespaces", [True, False])
@pytest.mark.parametrize("warm", [True, False])
def test_udp_to_a_local_listener_never_arrives(make_project, monkeypatch, udp_listener, warm, namespaces):
    monkeypatch.setattr(runner_module, "_NAMESPACES", namespaces, raising=False)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI-frognano-secret")
    root = make_project({"tests/test_udp.py": EXFILTRATE.replace("{port}", str(udp_listener.getsockname()[1]))})
    run, _ = _run(root, RunnerConfig(warm=warm))
    assert _outcomes(run) == {"test_send_the_secret": "passed"}
    with pytest.raises(socket.timeout):
        print(udp_listener.recvfrom(4096))  # nothing ever arrived
    assert "seccomp" in run.confinement


SECRETS = """
    import os, subprocess, sys

    def test_the_secret_is_nowhere():
        assert "AWS_SECRET_ACCESS_KEY" not in os.environ
        with open("/proc/self/environ", "rb") as fh:  # the environment this process started with
            assert b"frognano-secret" not in fh.read()
        for pid in (os.getppid(), FROGNANO):  # the run's parent, and FrogNano itself
            try:
                with open(f"/proc/{pid}/environ", "rb") as fh:
                    assert b"frognano-secret" not in fh.read()
            except PermissionError:
                pass  # Landlock: no ptrace-style access to processes outside the run
        out = subprocess.run(["env"], capture_output=True, text=True, check=True).stdout
        assert "frognano-secret" not in out

    def test_what_the_tests_get():
        assert os.environ["DECLARED_SETTING"] == "visible"
        assert os.environ["MYAPP_URL"] == "db://here"
        assert os.environ["PATH"] and "LC_ALL" in os.environ
        home = os.environ["HOME"]
        assert home.startswith(os.environ["TMPDIR"]) and os.path.isdir(home)
        open(os.path.join(home, ".toolrc"), "w").write("ok")  # a tool's dotfile stays in the run
        assert "UNDECLARED_SETTING" not in os.environ
"""


@landlock  # FrogNano's own /proc/PID/environ is out of reach only under Landlock
@pytest.mark.parametrize("warm", [True, False])
def test_tests_get_the_allow_list_and_what_test_env_names(tmp_path, monkeypatch, warm):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI-frognano-secret")
    monkeypatch.setenv("DECLARED_SETTING", "visible")
    monkeypatch.setenv("UNDECLARED_SETTING", "hidden")
    monkeypatch.setenv("MYAPP_URL", "db://here")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    home = os.environ["HOME"]
    root = write_project(tmp_path / "proj", {
        "tests/test_env.py": SECRETS.replace("FROGNANO)", f"{os.getpid()})"),
        "pyproject.toml": f"""
            [tool.frognano]
            test_env = ["DECLARED_SETTING", "MYAPP_*"]
            warm = {json.dumps(warm)}
        """,
    })
    settings = load_settings(root, environ={})
    assert settings.test_env == ["DECLARED_SETTING", "MYAPP_*"]
    run, _ = _run(root, RunnerConfig.from_settings(settings))
    assert _outcomes(run) == {"test_the_secret_is_nowhere": "passed", "test_what_the_tests_get": "passed"}
    assert not os.path.exists(os.path.join(home, ".toolrc"))


def test_test_env_setting_is_checked_everywhere(tmp_path):
    root = write_project(tmp_path / "proj", {"pyproject.toml": '[tool.frognano]\ntest_env = ["A=1"]\n'})
    with pytest.raises(UsageError, match="is not a variable name"):
        load_settings(root, environ={})
    (root / "pyproject.toml").write_text("")
    assert RunnerConfig.from_settings(load_settings(root, environ={"FROGNANO_TEST_ENV": "A B_*"})).test_env == ["A", "B_*"]
    from frognano.server.settings import engine_settings, parse_client

    client, problems, unknown = parse_client({"testEnv": ["TOKEN"]})  # the editor's camelCase key
    assert client.engine == {"test_env": ["TOKEN"]} and not problems and not unknown
    settings, problems = engine_settings(root, client.engine, environ={})
    assert settings.test_env == ["TOKEN"] and not problems
    _, problems, _ = parse_client({"testEnv": ["A=1"]})
    assert problems and "testEnv" in problems[0]


# -- no namespaces: said once -------------------------------------------------------------------

@landlock
def test_without_namespaces_it_is_said_once(make_project, monkeypatch, caplog):
    monkeypatch.setattr(runner_module, "_NAMESPACES", False)
    monkeypatch.setattr(runner_module, "_warned_partial", set())
    root = make_project({"tests/test_t.py": "def test_t():\n    pass\n"})
    with caplog.at_level("WARNING", logger="frognano"):
        first, _ = _run(root)
        second, _ = _run(root, RunnerConfig(warm=False))
    said = [r.getMessage() for r in caplog.records if "namespaces" in r.getMessage()]
    assert len(said) == 1 and "metadata writes outside the shadow copy" in said[0], said
    assert first.confinement == second.confinement and "namespaces" not in first.confinement
    assert first.tests["tests/test_t.py::test_t"].outcome == "passed"


@landlock
@pytest.mark.parametrize("name_denials", [False, True])
def test_a_denied_chmod_is_named_with_the_setting_that_allows_it(make_project, outside, name_denials):
    target = outside.sentinel / "precious.txt"
    root = make_project({"tests/test_cache.py": f"""
        import os

        def test_cache_mode():  # a library that fixes the mode of its cache file
            os.chmod({str(target)!r}, 0o600)
    """})
    mode = os.stat(target).st_mode
    run, runner = _run(root, name_denials=name_denials)
    assert run.tests["tests/test_cache.py::test_cache_mode"].outcome == "failed"
    assert os.stat(target).st_mode == mode
    note = runner.denial_note(run) or ""
    assert str(target) in note and "sandbox_writable" in note, note
    if name_denials:  # the audit hook saw it too, not only the error message
        assert str(target) in run.denied


FILTERED = """
    import ctypes, errno, json, os, platform, socket, sys, tempfile
    import frognano_confine

    how, why = frognano_confine.confine([tempfile.mkdtemp()])
    libc = ctypes.CDLL(None, use_errno=True)

    def call(number, *args):
        ctypes.set_errno(0)
        result = libc.syscall(ctypes.c_long(number), *[ctypes.c_long(a) for a in args])
        return errno.errorcode.get(ctypes.get_errno(), "ok") if result == -1 else "ok"

    def sock(*args):
        try:
            socket.socket(*args).close()
            return "ok"
        except OSError as exc:
            return errno.errorcode[exc.errno]

    x86 = platform.machine() == "x86_64"
    print(json.dumps({
        "how": how,
        "x32_getpid": call(0x40000000 | 39) if x86 else "EPERM",  # another table's call
        "io_uring_setup": call(425, 1, 0),
        "umount": call(166 if x86 else 39, 0, 0),
        "packet": sock(socket.AF_PACKET, socket.SOCK_RAW),
        "raw": sock(socket.AF_INET6, socket.SOCK_RAW | socket.SOCK_CLOEXEC, socket.IPPROTO_ICMPV6),
        "unix": sock(socket.AF_UNIX, socket.SOCK_STREAM),
    }))
"""


@landlock
@pytest.mark.skipif(os.uname().machine not in ("x86_64", "aarch64"), reason="the filter knows x86_64 and aarch64")
def test_the_filter_denies_other_tables_io_uring_mounts_and_raw_sockets():
    from frognano.sandbox.process import WORKER_DIR

    out = subprocess.run([sys.executable, "-c", textwrap.dedent(FILTERED)], capture_output=True, text=True, check=False,
                         env={**os.environ, "PYTHONPATH": str(WORKER_DIR)}, timeout=60)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.splitlines()[-1])
    assert "seccomp" in result.pop("how")
    assert result == {"x32_getpid": "EPERM", "io_uring_setup": "EPERM", "umount": "EPERM",
                      "packet": "EPERM", "raw": "EPERM", "unix": "ok"}
