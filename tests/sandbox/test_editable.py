"""A project installed in editable mode in its own .venv: tests must import the shadow's code."""

import os
import site
import subprocess
import sys

import pytest

from frognano.config import Settings
from frognano.repair.engine import Engine
from frognano.sandbox.runner import RunnerConfig, TestRunner
from frognano.sandbox.workspace import Workspace

PROJECT = {
    "pyproject.toml": """
        [build-system]
        requires = ["setuptools>=64"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "acme"
        version = "0.1.0"

        [tool.setuptools.packages.find]
        where = ["src"]
    """,
    "src/acme/__init__.py": "",
    "src/acme/pricing.py": """
        def discount(total):
            if total > 100:
                return total * 0.9
            return total
    """,
    "tests/test_pricing.py": """
        from acme.pricing import discount

        def test_small():
            assert discount(50) == 50

        def test_threshold():
            assert discount(100) == 90
    """,
}


@pytest.mark.slow
def test_editable_install_imports_the_shadow(make_project):
    root = make_project(PROJECT)
    venv = root / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    # pytest, pip and setuptools come from the environment running this test suite.
    with open(os.path.join(purelib, "_frognano_test_deps.pth"), "w") as fh:
        fh.write("\n".join(site.getsitepackages()) + "\n")
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--no-index", "-e", str(root)], check=True, capture_output=True)
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import acme.pricing as m; print(m.__file__)"],
                           capture_output=True, text=True, check=True, cwd="/").stdout.strip()
    assert where == str(root / "src" / "acme" / "pricing.py"), "the editable install is not active"

    with Workspace(root) as ws:
        ws.sync()
        assert not any(rel.startswith(".venv/") for rel in ws.entries), "the venv is not copied"
        with TestRunner(ws, RunnerConfig.from_settings(Settings())) as runner:
            assert runner.python == str(venv / "bin" / "python")
            fixed = {"src/acme/pricing.py": PROJECT_FIXED}
            with ws.edited(fixed):
                run = runner.run()
            assert run.leaks == []
            assert run.failing == [], "the shadow's edited code was not the code under test"
            assert runner.warm
        with Engine(ws, Settings()) as engine:
            report = engine.fix()
    assert report.status == "fixed"
    assert "`>` -> `>=`" in report.fix.notes[0].description


PROJECT_FIXED = "def discount(total):\n    if total >= 100:\n        return total * 0.9\n    return total\n"


def test_a_virtualenv_inside_the_project_keeps_the_runner_warm(make_project):
    """A project that keeps its venv in its own folder (``.venv/``, the common case) must not
    count pytest, which lives in that venv, as the project's own code: that sent every run to a
    fresh process."""
    import shutil
    import sys
    import sysconfig
    import venv
    from pathlib import Path

    from frognano.sandbox.runner import TestRunner
    from frognano.sandbox.workspace import Workspace

    root = make_project({
        "pkg/__init__.py": "def double(x):\n    return 2 * x\n",
        "tests/test_pkg.py": "from pkg import double\n\ndef test_double():\n    assert double(2) == 4\n",
    })
    venv.create(root / ".venv", with_pip=False, symlinks=True)
    ours = Path(sysconfig.get_paths()["purelib"])
    theirs = root / ".venv" / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    # pytest and its dependencies copied (not linked) into the project's venv, as pip would put them
    for name in ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py.py"):
        src = ours / name
        if src.is_dir():
            shutil.copytree(src, theirs / name)
        elif src.exists():
            shutil.copy(src, theirs / name)
    with Workspace(root) as ws:
        ws.sync()
        with TestRunner(ws) as runner:
            assert runner.python == str(root / ".venv" / "bin" / "python")
            run = runner.run()
            assert run.passing == ["tests/test_pkg.py::test_double"]
            assert runner.warm, runner.warm_reason
