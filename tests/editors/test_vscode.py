"""The VS Code extension: npm ci, tsc, vsce package, and the protocol flow against `frognano serve`.

VS Code itself cannot run here, so the extension's compiled code is type-checked and its
vscode-free parts unit-tested in Node, and `editors/vscode/test/protocol-flow.js` drives the real
server the way the extension's language client does (settings, diagnostics, code actions, the fix
command, a versioned WorkspaceEdit applied to the files, diagnostics clearing); with --slow-fix, on
a project whose fix takes minutes (slow_project.py), it checks that the fix command is answered
at once and that the job's $/progress reaches the client and can be cancelled.

`npm ci` runs once per session, and not at all while node_modules still matches
package-lock.json (a stamp in node_modules records the lock's hash); FROGNANO_NPM_CI=1 forces it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from tests.conftest import CHILD_TIMEOUT, EXAMPLES, REPO
from tests.editors.slow_project import ANSWER_S, SLOW_FILE, leftover_processes, slow_project

EXT = REPO / "editors" / "vscode"
STAMP = EXT / "node_modules" / ".frognano-npm-ci"
SERVER_COMMANDS = ["frognano.runTests", "frognano.fix", "frognano.applyFix", "frognano.toggleAutoFix",
                   "frognano.undoFix", "frognano.showDiagnosis", "frognano.showEpisode"]
SETTINGS = ["model", "testArgs", "timeout", "maxCandidates", "maxPairs", "searchSeconds", "episodes", "python",
            "autoFix", "debounceMs"]


def _run(cmd: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    """Run in editors/vscode without a terminal (so nothing can prompt), output captured."""
    try:
        return subprocess.run(cmd, cwd=kwargs.pop("cwd", EXT), stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(cmd)} took more than {timeout}s\nstdout:\n{exc.stdout}\nstderr:\n{exc.stderr}")


def _check(proc: subprocess.CompletedProcess, what: str) -> None:
    assert proc.returncode == 0, f"{what} failed (exit {proc.returncode})\nstdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"


@pytest.fixture(scope="session")
def npm() -> str:
    exe, node = shutil.which("npm"), shutil.which("node")
    if exe is None or node is None:
        pytest.skip("npm/node not installed: the VS Code extension cannot be built here")
    return exe


@pytest.fixture(scope="session")
def node_modules(npm) -> Path:
    """`npm ci`, once per session and only when package-lock.json changed since the last one."""
    lock = (EXT / "package-lock.json").read_bytes()
    node_version = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    digest = hashlib.sha256(lock + node_version.encode()).hexdigest()
    fresh = STAMP.is_file() and STAMP.read_text().strip() == digest
    if not fresh or os.environ.get("FROGNANO_NPM_CI") == "1":
        proc = _run([npm, "ci", "--no-audit", "--no-fund", "--prefer-offline"], timeout=CHILD_TIMEOUT)
        _check(proc, "npm ci")
        STAMP.write_text(digest + "\n")
    return EXT / "node_modules"


@pytest.fixture(scope="session")
def compiled(npm, node_modules) -> subprocess.CompletedProcess:
    """`npm run compile` (tsc -p .), once per session."""
    return _run([npm, "run", "compile"], timeout=300)


def _manifest() -> dict:
    return json.loads((EXT / "package.json").read_text())


def test_manifest_contract():
    pkg = _manifest()
    assert (pkg["name"], pkg["publisher"], pkg["main"]) == ("frognano", "frognano", "./out/extension.js")
    assert pkg["engines"]["vscode"] == "^1.90.0"
    assert set(pkg["activationEvents"]) == {"onLanguage:python", "workspaceContains:**/pyproject.toml"}
    assert pkg["license"] == "MIT" and pkg["repository"]
    assert "vscode-languageclient" in pkg["dependencies"]
    assert {"typescript", "@types/vscode", "@types/node", "@vscode/vsce", "vscode-languageserver-protocol"} <= set(pkg["devDependencies"])
    assert pkg["scripts"]["compile"] == "tsc -p ."

    titles = {c["command"]: f"{c['category']}: {c['title']}" for c in pkg["contributes"]["commands"]}
    assert set(SERVER_COMMANDS) <= set(titles)
    assert titles["frognano.runTests"] == "FrogNano: Run Tests"
    assert all(t.startswith("FrogNano: ") for t in titles.values())

    props = pkg["contributes"]["configuration"]["properties"]
    for key in SETTINGS + ["serverPath"]:
        prop = props[f"frognano.{key}"]
        assert "default" in prop and (prop.get("markdownDescription") or prop.get("description")), key
    assert props["frognano.serverPath"]["default"] == "frognano"
    assert props["frognano.autoFix"]["enum"] == ["off", "suggest", "apply"]
    assert props["frognano.autoFix"]["default"] == "suggest"
    assert props["frognano.debounceMs"]["default"] == 300

    for name in ("package-lock.json", "LICENSE", "README.md", "tsconfig.json", "src/extension.ts", ".vscodeignore"):
        assert (EXT / name).is_file(), name
    ignored = (EXT / ".gitignore").read_text().split()
    assert {"node_modules/", "out/", "*.vsix"} <= set(ignored)


@pytest.mark.slow
def test_compile(compiled):
    _check(compiled, "npm run compile")
    for name in ("extension", "settings", "status", "serverPath"):
        assert (EXT / "out" / f"{name}.js").is_file(), name


@pytest.mark.slow
def test_node_unit_tests(npm, compiled):
    """In Node: the vscode-free modules (settings mapping, status bar text, server lookup,
    episode records), and extension.js itself against fake `vscode` and language-client modules
    (what it spawns, sends and answers, the status bar, stand-in commands); plus a type-check of
    the protocol test script."""
    _check(compiled, "npm run compile")
    _check(_run([npm, "run", "check:test"], timeout=120), "tsc -p test")
    proc = _run(["node", "--test", "test/unit.test.js", "test/extension.test.js"], timeout=120)
    _check(proc, "node --test")
    assert "# fail 0" in proc.stdout


@pytest.mark.slow
def test_episode_cache_path_matches_the_server(compiled, tmp_path, monkeypatch):
    """The palette's episode picker looks where frognano.paths.project_cache puts records."""
    from frognano.paths import project_cache

    _check(compiled, "npm run compile")
    monkeypatch.setenv("FROGNANO_CACHE_DIR", str(tmp_path / "cache"))
    project = tmp_path / "some project"
    project.mkdir()
    (tmp_path / "link").symlink_to(project)
    for path in (project, tmp_path / "link"):
        proc = _run(["node", "-e", "process.stdout.write(require('./out/episodes').projectCache(process.argv[1]))",
                     str(path)], timeout=60)
        _check(proc, "node projectCache")
        assert proc.stdout == str(project_cache(path))


@pytest.mark.slow
def test_vsce_package(npm, node_modules, tmp_path):
    vsix = tmp_path / "frognano.vsix"
    proc = _run(["npx", "--no-install", "vsce", "package", "--out", str(vsix)], timeout=300)
    _check(proc, "vsce package")
    assert vsix.is_file()
    names = set(zipfile.ZipFile(vsix).namelist())
    for required in ("extension/package.json", "extension/out/extension.js", "extension/readme.md",
                     "extension/LICENSE.txt", "extension/node_modules/vscode-languageclient/package.json",
                     "extension/node_modules/vscode-languageserver-protocol/package.json"):
        assert required in names, f"{required} missing from the .vsix"
    # The checkout it was packaged from, where the README installs the server (serverPath.ts).
    assert json.loads(zipfile.ZipFile(vsix).read("extension/out/checkout.json")) == {"checkout": str(REPO)}
    leaked = [n for n in names if n.startswith(("extension/src/", "extension/test/", "extension/scripts/",
                                                "extension/node_modules/typescript/",
                                                "extension/node_modules/@vscode/vsce/", "extension/node_modules/@types/"))
              or n.endswith(".map")]
    assert not leaked, f"development files in the .vsix: {sorted(leaked)[:10]}"


def _server() -> Path:
    exe = Path(sys.executable).parent / ("frognano.exe" if os.name == "nt" else "frognano")
    if not exe.is_file():
        found = shutil.which("frognano")
        if found is None:
            pytest.skip("no frognano executable next to this interpreter or on PATH (pip install -e .)")
        exe = Path(found)
    return exe


@pytest.mark.slow
@pytest.mark.timeout(720)
@pytest.mark.parametrize("auto_fix", ["off", "apply"])
def test_protocol_flow_fixes_calc(node_modules, tmp_path, auto_fix):
    """Open calc/stats.py, get the failing test as an Error, get it fixed, see the Error clear.

    autoFix "off": the user's path through code actions ("Fix with FrogNano", then the verified
    "FrogNano: ..." action and its versioned WorkspaceEdit). autoFix "apply": the server finds
    the fix itself and sends it as a versioned workspace/applyEdit.
    """
    project = tmp_path / "calc"
    shutil.copytree(EXAMPLES / "calc", project, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache", ".frognano"))
    cache = tmp_path / "cache"
    cache.mkdir()
    log = tmp_path / "server.log"
    env = {**os.environ, "FROGNANO_CACHE_DIR": str(cache)}
    started = time.monotonic()
    proc = _run(["node", "test/protocol-flow.js", str(project), "--server", str(_server()), "--file", "calc/stats.py",
                 "--setting", f"autoFix={auto_fix}", "--log", str(log),
                 "--timeout-diagnostics", "120", "--timeout-fix", "300", "--timeout-clear", "120"],
                timeout=660, env=env)
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, (f"protocol flow failed after {elapsed:.1f}s (exit {proc.returncode})\n"
                                  f"{proc.stderr[-8000:]}")
    summary = json.loads(proc.stdout)
    assert summary["ok"]
    assert set(SERVER_COMMANDS) <= set(summary["serverCommands"])

    errors = [d for d in summary["initialDiagnostics"] if d["severity"] == 1]
    assert any(d["file"] == "tests/test_stats.py" for d in errors), summary["initialDiagnostics"]
    fix = summary["fix"]
    assert fix["applied"] and fix["versioned"] and fix["files"] == ["calc/stats.py"], fix
    assert "age >= 18" in (project / "calc" / "stats.py").read_text()
    assert summary["finalDiagnostics"] == []
    states = [s.get("state") for s in summary["statuses"]]
    assert "failing" in states and "fixing" in states and states[-1] == "passing", states
    assert all(s.get("autoFix") == auto_fix for s in summary["statuses"]), summary["statuses"]
    kinds = [p["kind"] for p in summary["progress"]]
    assert kinds and kinds[0] == "begin" and kinds[-1] == "end", summary["progress"]
    if auto_fix == "off":
        assert summary["fixCommand"]["command"] == "frognano.fix", summary["fixCommand"]
        # Answered at once with the started job; its outcome came as frognano/result.
        assert summary["fixCommand"]["seconds"] < ANSWER_S, summary["fixCommand"]
        job = summary["fixCommand"]["result"]["job"]
        assert summary["fixCommand"]["result"] == {"status": "started", "job": job}, summary["fixCommand"]
        done = [x for x in summary["results"] if x["job"] == job]
        assert [(x["command"], x["result"]["status"]) for x in done] == [("frognano.fix", "fixed")], summary["results"]
        assert fix["appliedBy"] == "code action edit" and fix["title"].startswith("FrogNano:"), fix
        assert fix["data"]["frognano"] == "verifiedFix", fix
        assert "Fix with FrogNano" in summary["actionsOffered"] and "Run tests" in summary["actionsOffered"]
    else:
        assert fix["appliedBy"] == "workspace/applyEdit" and fix["label"].startswith("FrogNano:"), fix

    # The applied fix really makes the suite pass, outside FrogNano.
    tests = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], timeout=120, cwd=project)
    _check(tests, "pytest in the fixed project")


@pytest.mark.slow
def test_protocol_slow_fix_answers_at_once_and_reports_progress(node_modules, tmp_path):
    """"Fix with FrogNano" on a project whose fix takes minutes, as the extension's language
    client sends it: answered within a second with the started job; the server creates a
    progress token (window/workDoneProgress/create) and reports begin (cancellable) and
    percentages on it; a second request joins the job; VS Code's Cancel on the progress
    (window/workDoneProgress/cancel) ends the job at once, with frognano/result "cancelled"."""
    project = slow_project(tmp_path / "slow")
    cache = tmp_path / "cache"
    cache.mkdir()
    env = {**os.environ, "FROGNANO_CACHE_DIR": str(cache)}
    started = time.monotonic()
    proc = _run(["node", "test/protocol-flow.js", str(project), "--server", str(_server()), "--file", SLOW_FILE,
                 "--slow-fix", "--log", str(tmp_path / "server.log"), "--timeout-diagnostics", "30"],
                timeout=60, env=env)
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, f"slow fix flow failed after {elapsed:.1f}s (exit {proc.returncode})\n{proc.stderr[-8000:]}"
    summary = json.loads(proc.stdout)
    fix = summary["slowFix"]
    print(json.dumps({k: v for k, v in fix.items()}, indent=1))
    print("progress:", [(p["t"], p["kind"], p.get("message"), p.get("percentage")) for p in summary["progress"]])
    assert summary["ok"]

    # The answer: the started job, within a second.
    assert fix["command"] == "frognano.fix" and fix["via"] == 'code action "Fix with FrogNano"', fix
    job = fix["answer"]["job"]
    assert fix["answer"] == {"status": "started", "job": job} and fix["seconds"] < ANSWER_S, fix

    # Its progress, on the token the server created: begin (cancellable), reports with percentages.
    token = fix["token"]
    assert summary["progressCreated"] == [token], summary["progressCreated"]
    mine = [p for p in summary["progress"] if p["token"] == token]
    assert mine[0]["kind"] == "begin" and mine[0]["title"] == "FrogNano: fixing", mine
    assert any(p["kind"] == "report" and p.get("percentage") is not None for p in mine), mine
    # The status bar said "fixing".  (Opening the test file, as clicking the problem does, queues
    # a run of its tests behind the fix on the project's worker: the status then says "running"
    # although that run waits for the search.)
    states = [(x["t"], x["state"]) for x in summary["statuses"]]
    assert any(state == "fixing" and t >= fix["at"] - 0.1 for t, state in states), states

    # Asked again while it runs: the same job, at once; no result yet.
    assert fix["again"] == {"status": "started", "job": job, "joined": True} and fix["againSeconds"] < ANSWER_S, fix
    assert fix["resultsBeforeCancel"] == 0, summary["results"]

    # Cancelled from the progress: the result, the progress end, the status back to failing.
    assert fix["result"] == {"t": fix["result"]["t"], "command": "frognano.fix", "job": job,
                             "result": {"status": "cancelled", "message": "fix cancelled"}}, fix["result"]
    assert fix["cancelSeconds"] < 3, fix
    assert mine[-1]["kind"] == "end", mine
    assert (fix["statusAfter"]["state"], fix["statusAfter"]["message"]) == ("failing", "fix cancelled"), fix
    assert elapsed < 30, elapsed
    assert leftover_processes(tmp_path) == []
