"""The task environment: a task row becomes a live buggy sandbox, a solver acts in it through the
harness ``frognano fix`` uses, and the task's own tests give the reward (used by ``frognano
eval`` and by training).

One ``RepoEnv`` per repository tree holds one shadow copy, one warm runner and one incremental
``Session``, reused from task to task: the first task runs the whole suite with per-test
coverage, and every later task re-runs only the tests its bug (and the previous task's) can
affect (``repair/incremental.py``, the same machinery as the language server and watch mode).
The bug is laid over the clean tree as the shadow's overlay, so the project's files are never
written, and the shadow holds no ``.git``: a model cannot read the fix out of history.

``reset(task)`` checks the tree (a git commit: HEAD, else the tree exported from that commit; a
content hash: recomputed and compared), applies the bug's patch, and checks that the
``FAIL_TO_PASS`` tests fail.  Anything wrong is a ``TaskError`` naming the task's problem.

The reward (``reward``) is measured on pristine test files (docs/ARCHITECTURE.md, invariant 6): 1 when every
``FAIL_TO_PASS`` test passes and no ``PASS_TO_PASS`` test fails, else 0; a patch touching the
specification, or whose edit of the code under test reaches into the test runner
(``repair.tampering``), scores 0 without running; a run in which the code under test rewrote
pytest's reporting scores 0; and a run that says "resolved" is confirmed in a fresh interpreter
(pytest's exit status included) before it scores 1, as an offered fix is: a reward the policy
could win by forging results or by a module-level change the warm session's swap missed would
teach exactly that.  ``RewardConfig`` adds partial credit and a
format penalty.  A failure of FrogNano's own machinery is an ``InfraError``: the caller records
it as ``error``, outside every rate and every gradient, never as a 0.
"""

from __future__ import annotations

import logging
import os
import subprocess
import tarfile
import tempfile
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..config import Settings
from ..errors import FrogNanoError
from ..repair.engine import Diagnosis, Engine
from ..repair.incremental import Selection, Session
from ..repair import tampering
from ..repair.patch import Patch
from ..sandbox.results import RunResult
from ..sandbox.runner import RunnerConfig, find_python
from ..sandbox.specification import Specification
from ..sandbox.workspace import Workspace, read_source
from .diffs import PatchError, apply_patch
from .tasks import EvalTask

__all__ = ["InfraError", "RepoEnv", "Reward", "RewardConfig", "TaskError", "TaskState", "find_repo"]

log = logging.getLogger(__name__)


class TaskError(FrogNanoError):
    """A task that cannot be set up: its repository is missing, its tree does not match its
    base, its patch does not apply, or its bug does not reproduce.  Recorded as that task's
    ``error``; the other tasks go on."""


class InfraError(FrogNanoError):
    """FrogNano's own machinery failed (the runner was lost, a sandbox crashed): ``error``."""


@dataclass(frozen=True)
class RewardConfig:
    """How a final patch is scored.  The default is the binary reward of the task's tests."""

    partial: bool = False  # fraction of FAIL_TO_PASS passing (0 when a PASS_TO_PASS test fails)
    format_penalty: float = 0.0  # subtracted per malformed tool call of the episode

    def __post_init__(self) -> None:
        if self.format_penalty < 0:
            raise FrogNanoError(f"format_penalty must not be negative, got {self.format_penalty}")


@dataclass
class Reward:
    value: float
    resolved: bool  # every FAIL_TO_PASS passes and no PASS_TO_PASS fails
    fixed: list[str] = field(default_factory=list)  # FAIL_TO_PASS tests that pass
    still_failing: list[str] = field(default_factory=list)
    regressions: list[str] = field(default_factory=list)  # PASS_TO_PASS tests that fail
    refused: str = ""  # why the patch was not run (it touches the specification)


@dataclass
class TaskState:
    """A task laid out in its environment, ready for a solver."""

    task: EvalTask
    diagnosis: Diagnosis  # the buggy tree's picture, focused on FAIL_TO_PASS
    timeouts: dict[str, float]  # per-test limits from the buggy run's durations
    spec: Specification
    # Reward runs by the files a patch writes: a group's episodes often submit the same patch
    # (or none), and its tests need to run only once while the task stays laid out.
    runs: dict[tuple, RunResult] = field(default_factory=dict, repr=False)


def find_repo(task: EvalTask, repos: list[Path]) -> Path:
    """The local folder of ``task.repo``.  Without ``repos``: the path itself.  With ``repos``
    (``eval --repos``), only a folder inside them: the row's path when it resolves (symlinks
    followed) inside one of them, else the first of ``repos`` named like it (its last component,
    or SWE-style ``owner__name``) or holding a folder so named.  A row that leads anywhere else
    (an absolute, ``..`` or ``~`` path, a link out of the folder) is refused: a task file is
    input, and the folder it names is copied and its code run.  ``TaskError`` when none fits."""
    from ..synthesis.store import repo_name

    given = Path(task.repo).expanduser()
    if not repos:
        if given.is_dir():
            return given.resolve()
        raise TaskError(f"repository {task.repo} not found (give --repos DIR)")
    folders = [Path(os.path.realpath(Path(r).expanduser())) for r in repos]

    def inside(path: Path) -> bool:
        real = os.path.realpath(path)
        return any(real == str(f) or real.startswith(str(f).rstrip(os.sep) + os.sep) for f in folders)

    escapes = given.is_dir() and not inside(given)
    if given.is_dir() and not escapes:
        return given.resolve()
    names = {given.name, repo_name(task.repo), task.repo.rstrip("/").rsplit("/", 1)[-1]}
    names = {n for n in names if n not in ("", ".", "..") and "/" not in n and os.sep not in n
             and not n.startswith("~")}
    for folder in folders:
        if folder.name in names and folder.is_dir():
            return folder
        for name in sorted(names):
            if (folder / name).is_dir():
                if inside(folder / name):
                    return (folder / name).resolve()
                escapes = True  # a link inside the folder that leads out of it
    where = ", ".join(str(r) for r in repos)
    if escapes:
        raise TaskError(f"repository {task.repo} leads outside the --repos folders ({where}); refused")
    raise TaskError(f"repository {task.repo} not found under {where}")


def _git(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, timeout=120)


def git_tree(root: Path, commit: str, cache: Path) -> Path:
    """A folder holding ``root``'s tree at ``commit``: ``root`` itself when HEAD is that commit
    and no tracked file differs from it, else the commit exported once into ``cache``."""
    top = _git(root, "rev-parse", "--show-toplevel")
    if top.returncode != 0:
        raise TaskError(f"{root} is not a git repository, but the task's base is git commit {commit[:12]}")
    full = _git(root, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
    if full.returncode != 0:
        raise TaskError(f"{root} has no commit {commit[:12]} (the task's base_commit)")
    sha = full.stdout.decode().strip()
    head = _git(root, "rev-parse", "HEAD").stdout.decode().strip()
    clean = _git(root, "status", "--porcelain", "--untracked-files=no").stdout.strip() == b""
    if sha == head and clean and Path(top.stdout.decode().strip()).resolve() == root.resolve():
        return root
    dest = cache / f"{root.name}-{sha[:12]}"
    if not (dest / ".frognano-tree").exists():
        # Exported whole into a fresh folder, then renamed: a half-written tree is never used.
        cache.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f"{root.name}-", dir=cache))
        archive = tmp / "tree.tar"
        done = subprocess.run(["git", "-C", str(root), "archive", "--format=tar", "-o", str(archive), sha],
                              capture_output=True, timeout=600)
        if done.returncode != 0:
            raise TaskError(f"cannot export commit {sha[:12]} of {root}: {done.stderr.decode()[:200]}")
        tree = tmp / "tree"
        with tarfile.open(archive) as tar:
            tar.extractall(tree, filter="data")
        archive.unlink()
        (tree / ".frognano-tree").write_text(f"{root}\n{sha}\n")
        if dest.exists():  # another process won the race
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tree.rename(dest)
            tmp.rmdir()
    return dest


class RepoEnv:
    """One repository tree's tasks: a shadow copy, a warm runner and an incremental session.

    ``settings`` are the run's (the tree's ``[tool.frognano]`` is not read: every task of an
    evaluation runs under the same rules); the tests run with ``python`` (the repository's
    ``.venv`` when the tree is an export of it).
    """

    def __init__(self, tree: Path, settings: Settings, *, model=None, progress=None) -> None:
        self.tree = tree
        self.ws = Workspace(tree)
        self.ws.open()
        self.engine = Engine(self.ws, settings, progress, model)
        self.session = Session(self.engine)
        self._content_hash: str | None = None
        self._laid: set[str] = set()  # files the overlay holds now (the previous task's bug)
        self.selection: Selection | None = None  # the tests the last reset ran
        self._looked_up = False  # the picture store was asked for the clean tree's run
        # Wins confirmed in a fresh interpreter, by (task, files written): a confirmation is a
        # fresh pytest start (~0.85 s on 2 cores, an eighth of a tiny training run), and the
        # same patch of the same task is confirmed once, not at every layout of the task (the
        # tree is content-checked at each reset; synthesis keeps only deterministic tests).
        self._confirmed: dict[tuple, RunResult] = {}
        self.listed: dict[tuple, tuple] = {}  # the candidates tool's edits per task (rollout.candidates_for)
        self.adopted = False  # the session started from a stored run

    def close(self) -> None:
        self.engine.close()
        self.ws.close()

    # -- reset --------------------------------------------------------------------------
    def content_hash(self) -> str:
        """``synth``'s content hash of the tree (its Python files' paths and bytes), once."""
        if self._content_hash is None:
            from ..synthesis.validate import content_hash

            self.ws.sync()  # the listing of the tree's files
            self._content_hash = content_hash(self.ws.root, self.ws.python_files())
        return self._content_hash

    def reset(self, task: EvalTask, cancel: threading.Event | None = None) -> TaskState:
        """Lay ``task``'s bug over the clean tree and diagnose it; ``TaskError`` when it cannot."""
        if task.base_commit and task.base_kind == "content":
            found = self.content_hash()
            if not found.startswith(task.base_commit):
                raise TaskError(f"{self.tree}: content hash {found[:12]} does not match the task's "
                                f"base {task.base_commit[:12]} (the tree changed since the task was made)")
        buggy = self._buggy_texts(task)
        if not self.session.known and not self._looked_up:
            self._start_from_store()
        self.ws.set_overlay(buggy)
        try:
            self.engine.sync()
        except FrogNanoError as exc:
            raise TaskError(str(exc)) from None
        changed = self._laid | set(buggy)
        self._laid = set(buggy)
        selection = self.session.select(changed) if self.session.known else Selection.all()
        self.selection = selection  # what this reset ran (for tests and logs)
        log.info("%s: %s", task.instance_id, selection.reason)
        update = self.session.run(selection, cancel)
        if update.cancelled:
            raise InfraError("cancelled")
        run = update.diagnosis.run
        if update.ran.collect_errors:
            raise TaskError(f"the buggy tree does not collect: {update.ran.collect_errors[0].summary}")
        missing = [n for n in (*task.FAIL_TO_PASS, *task.PASS_TO_PASS) if n not in run.tests]
        if missing:
            raise TaskError(f"{len(missing)} of the task's tests are not in the suite (e.g. {missing[0]})")
        passing = [n for n in task.FAIL_TO_PASS if not run.tests[n].failed]
        if passing:
            raise TaskError(f"the bug does not reproduce: {passing[0]} passes on the buggy tree")
        # Tests that fail for reasons outside the task (the environment) are not the solver's:
        # they are left out of its picture rather than counted as failures it must fix.
        wanted = set(task.FAIL_TO_PASS)
        focused = replace(run, tests={n: t for n, t in run.tests.items() if not t.failed or n in wanted})
        diagnosis = Diagnosis(focused, update.diagnosis.coverage,
                              self.engine.locate(focused, update.diagnosis.coverage))
        timeouts = self.engine.verifier(diagnosis).timeouts
        spec = Specification.of_workspace(self.ws, [*run.tests, *run.collected])
        return TaskState(task, diagnosis, timeouts, spec)

    def _start_from_store(self) -> None:
        """Start the session from the clean tree's stored whole-suite run when there is one
        (``frognano synth`` saves it), so the first task re-runs only what its bug affects."""
        from ..repair.engine import Diagnosis
        from ..sandbox.pictures import Pictures, state_key
        from ..sandbox.spectra import CoverageMap

        self._looked_up = True
        self.ws.set_overlay({})
        try:
            self.engine.sync()
        except FrogNanoError as exc:
            raise TaskError(str(exc)) from None
        key = state_key(self.ws, RunnerConfig.from_settings(self.engine.settings))
        run = Pictures(self.ws).load(key)
        if run is not None:
            log.info("%s: starting from the stored run of the clean tree (%d tests)", self.tree, len(run.tests))
            self.session.adopt(Diagnosis(run, CoverageMap.from_run(run), []))
            self.adopted = True

    def _buggy_texts(self, task: EvalTask) -> dict[str, str]:
        def read(rel: str) -> str | None:
            path = self.tree / rel
            if not path.is_file():
                return None
            try:
                return read_source(path)
            except (OSError, UnicodeDecodeError, SyntaxError) as exc:
                raise TaskError(f"{rel}: cannot be read as text ({type(exc).__name__})") from None

        if not task.patch.strip():
            return {}
        try:
            texts = apply_patch(task.patch, read)
        except PatchError as exc:
            raise TaskError(f"the task's patch does not apply: {exc}") from None
        deleted = sorted(rel for rel, text in texts.items() if text is None)
        if deleted:
            raise TaskError(f"the task's patch deletes {deleted[0]}; deleting files is not supported")
        for rel in texts:
            try:
                self.ws.check_editable(rel)
            except FrogNanoError as exc:
                raise TaskError(f"the task's patch names {rel}: {exc}") from None
        return {rel: text for rel, text in texts.items() if text is not None}

    # -- reward -------------------------------------------------------------------------
    def reward(self, state: TaskState, patch: Patch | None, *, config: RewardConfig = RewardConfig(),
               malformed: int = 0) -> Reward:
        """Score ``patch`` (None: no patch) by the task's tests, run from pristine test files."""
        task = state.task
        f2p, p2p = list(task.FAIL_TO_PASS), list(task.PASS_TO_PASS)
        penalty = config.format_penalty * malformed
        for e in patch.edits if patch else ():
            why = state.spec.reason(e.path, e.before, e.after)
            if not why and e.path.endswith(".py") and not state.spec.edits_tests([e.path]):
                why = tampering.refusal(e.path, e.before, e.after)
            if why:
                return Reward(-penalty, False, still_failing=f2p, refused=why)
        files = patch.texts() if patch else {}
        protected = [r for r in state.spec.protected(self.ws.entries) if r not in files]
        strays = state.spec.strays(self.ws.entries)
        key = tuple(sorted(files.items()))
        if key in state.runs:
            return score(state.runs[key], f2p, p2p, config, malformed)
        won = (task.instance_id, task.patch, key)
        if won in self._confirmed:
            state.runs[key] = self._confirmed[won]
            return score(state.runs[key], f2p, p2p, config, malformed)
        def run_once(fresh: bool) -> tuple[RunResult, list[str]]:
            try:
                with self.ws.edited(files):
                    self.ws.ensure_pristine(protected, strays)
                    run = self.engine.runner.run([*f2p, *p2p], timeouts=state.timeouts, fresh=fresh)
                    rewrote = self.ws.ensure_pristine(protected, strays)
            except (FrogNanoError, OSError) as exc:
                raise InfraError(f"the reward run failed: {exc}") from exc
            if run.cancelled:
                raise InfraError("the reward run was cancelled")
            return run, rewrote

        run, rewrote = run_once(fresh=False)
        if not rewrote and not run.tampered and patch and score(run, f2p, p2p).resolved:
            # Only a win is confirmed (most episodes lose, and a loss cannot be forged upwards).
            run, rewrote = run_once(fresh=True)
            if run.returncode != 0 and score(run, f2p, p2p).resolved:  # a fresh run always has its code
                return Reward(-penalty, False, still_failing=f2p,
                              refused=f"the tests reported passing but pytest exited {run.returncode}")
            if not rewrote and not run.tampered:
                self._confirmed[won] = run
        if rewrote:
            return Reward(-penalty, False, still_failing=f2p,
                          refused=f"the run rewrote {', '.join(rewrote[:3])} (restored)")
        if run.tampered:
            return Reward(-penalty, False, still_failing=f2p,
                          refused=f"the code under test rewrote pytest's reporting ({', '.join(run.tampered[:3])})")
        state.runs[key] = run
        return score(run, f2p, p2p, config, malformed)


def score(run: RunResult, f2p: list[str], p2p: list[str], config: RewardConfig = RewardConfig(),
          malformed: int = 0) -> Reward:
    """The reward of one run of the task's tests (a test missing from it counts as failing)."""
    def ok(n: str) -> bool:
        return n in run.tests and run.tests[n].passed

    fixed = [n for n in f2p if ok(n)]
    still = [n for n in f2p if not ok(n)]
    regressions = [n for n in p2p if not ok(n)]
    resolved = not still and not regressions and not run.collect_errors
    if config.partial:
        value = 0.0 if regressions or run.collect_errors else len(fixed) / len(f2p)
    else:
        value = 1.0 if resolved else 0.0
    return Reward(value - config.format_penalty * malformed, resolved, fixed, still, regressions)


def tree_for(task: EvalTask, repo: Path, cache: Path) -> Path:
    """The folder to lay ``task`` out from: the repository, or its tree at a git base."""
    if task.base_commit and task.base_kind == "git":
        return git_tree(repo, task.base_commit, cache)
    return repo


def python_for(repo: Path, tree: Path, settings: Settings) -> Settings:
    """An exported tree has no virtual environment: its tests run with the repository's."""
    if tree != repo and settings.python is None:
        return replace(settings, python=find_python(repo, None))
    return settings
