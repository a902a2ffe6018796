"""Validated bug tasks per minute on a real library: FrogNano's synthesis against a SWE-smith-style loop.

What it measures
    A real pure-Python library (default ``more-itertools==10.5.0``) is downloaded as an sdist
    from PyPI at run time (``pip download --no-deps --no-binary :all:``), unpacked into a
    temporary folder, and given its own venv (``python -m venv`` + ``pip install pytest``).  The
    library is *not* installed into that venv: it has a flat layout, so both validators import
    it from the (edited) working copy, which is what makes an injected bug visible to the tests.
    Its whole suite must be green there first; tests that fail at baseline are deselected (and
    listed), for both validators alike.

    ``frognano``   ``synthesize([repo], out, n=N, seed=S, workers=1,
                   config=RunnerConfig(python=VENV_PY))``: one run of the suite with
                   function-level coverage and, on a second shadow copy at the same time, one in
                   reverse order (order-dependent tests are excluded); the candidate stream for
                   ``seed`` (``CandidateStream``: one bug per covered function before a second);
                   then per candidate the warm fork server runs only the covering tests plus 10
                   sampled others (the run stops at the first timeout, which rejects the bug),
                   reruns the failing ones to check they fail again, and runs them on the clean
                   code on their own (reversed).  Stops after ``N`` tasks.
    ``swe-smith``  the baseline, what SWE-smith's validation does: for the *same* candidates in
                   the *same* order (the first K that FrogNano tried, K = its ``tried`` count),
                   write the bug into a plain copy of the library and run the WHOLE suite in a
                   fresh ``VENV_PY -m pytest -q -p no:cacheprovider --assert=plain
                   --junitxml=...`` process (``--assert=plain`` as FrogNano uses it),
                   reading pass/fail per test from the JUnit XML.  A candidate is kept when at
                   least one test fails and pytest exits 0/1 (exit 2+ = collection error,
                   rejected; a run past ``5 x baseline suite time + 10 s`` is a timeout, rejected);
                   then the whole suite runs a second time and the task is kept only if the same
                   tests fail (determinism check).

    So both validators see the same number of candidates (K), not a fixed time budget.
    ``seconds`` for FrogNano is ``SynthSummary.seconds`` (everything: shadow syncs, the coverage
    and reversed runs, listing candidates, the fork servers' start, the candidate loop); for the
    baseline it is the copy of the library plus the candidate loop (its list of candidates is
    given to it for free).  Downloading, unpacking and creating the venv are not timed.

    The two validators need not keep exactly the same candidates: FrogNano rejects a bug that
    breaks one of its sampled non-covering tests, or that only breaks non-covering tests; the
    baseline keeps any bug that fails some test.  Both counts are printed.

Target: ``frognano`` yields at least 5x as many validated tasks per minute as ``swe-smith``.

    .venv/bin/python benchmarks/synthesis.py                 # N=20 tasks
    .venv/bin/python benchmarks/synthesis.py --quick         # N=5 tasks
    .venv/bin/python benchmarks/synthesis.py --package toolz==1.0.0
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import _table  # benchmarks/_table.py: this script's own folder is on sys.path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


@dataclass
class Row:
    mode: str
    tried: int
    valid: int
    seconds: float

    @property
    def per_minute(self) -> float:
        return 60.0 * self.valid / self.seconds if self.seconds > 0 else float("inf")


# -- the library ------------------------------------------------------------------------------------

def fetch_library(spec: str, scratch: Path) -> Path:
    dl = scratch / "dl"
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                    spec, "-d", str(dl)], check=True)
    (archive,) = [p for p in dl.iterdir() if p.name.endswith((".tar.gz", ".zip"))]
    if archive.name.endswith(".zip"):
        shutil.unpack_archive(archive, scratch / "src")
    else:
        with tarfile.open(archive) as tar:
            tar.extractall(scratch / "src", filter="data")
    (root,) = list((scratch / "src").iterdir())
    if not (root / "tests").is_dir():
        raise SystemExit(f"{spec}: the sdist has no tests/ folder")
    return root


def make_venv(scratch: Path) -> str:
    venv = scratch / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    subprocess.run([py, "-m", "pip", "install", "-q", "pytest"], check=True)
    return py


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("PYTHONPATH", None)
    return env


def run_suite(py: str, root: Path, xml: Path, extra: list[str], timeout: float | None) -> tuple[int, dict[str, bool]]:
    """Whole suite in a fresh process; (exit code, {test id: passed}).  Exit code -1: timeout."""
    if xml.exists():
        xml.unlink()
    # --assert=plain as synthesize uses it: outcomes are all either validator needs.
    cmd = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--assert=plain", f"--junitxml={xml}", *extra]
    try:
        proc = subprocess.run(cmd, cwd=root, env=_env(), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=timeout)
    except subprocess.TimeoutExpired:
        return -1, {}
    results: dict[str, bool] = {}
    if xml.exists():
        for case in ET.parse(xml).getroot().iter("testcase"):
            tid = f"{case.get('classname')}::{case.get('name')}"
            bad = any(child.tag in ("failure", "error") for child in case)
            results[tid] = not bad
    return proc.returncode, results


# -- the two validators -----------------------------------------------------------------------------

def run_frognano(root: Path, py: str, n: int, seed: int, test_args: list[str], out: Path) -> tuple[Row, int]:
    from frognano.sandbox.runner import RunnerConfig
    from frognano.synthesis.synth import synthesize

    summary = synthesize([root], out, n=n, seed=seed, workers=1,
                         config=RunnerConfig(python=py, test_args=test_args, warm=True))
    tried = sum(s.tried for s in summary.families.values())
    loop = sum(s.seconds for s in summary.families.values())
    skips = dict(summary.skips)
    return Row("frognano (warm, covering tests)", tried, summary.written, summary.seconds), (skips, loop)


def candidate_list(root: Path, py: str, seed: int, test_args: list[str]):
    """The candidates ``synthesize`` validates, in its order (same seed, same kind of coverage
    run), as a lazy stream, and the sources they apply to."""
    from frognano.sandbox.runner import RunnerConfig, TestRunner
    from frognano.sandbox.spectra import CoverageMap
    from frognano.sandbox.workspace import Workspace
    from frognano.synthesis.inject import CandidateStream

    ws = Workspace(root)
    ws.open()
    ws.sync()
    with TestRunner(ws, RunnerConfig(python=py, test_args=[*test_args, "--assert=plain"])) as runner:
        base = runner.run(None, coverage="functions")
    stream = CandidateStream(ws, CoverageMap.from_run(base), seed=seed)
    sources = {path: ws.read(path) for path, _ in stream.functions}
    return stream, sources, ws


def run_swe_smith(root: Path, py: str, cands, sources: dict[str, str], extra: list[str],
                  timeout: float, scratch: Path) -> tuple[Row, dict[str, int]]:
    started = time.perf_counter()
    copy = scratch / "plain"
    shutil.copytree(root, copy, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    xml = scratch / "report.xml"
    valid = 0
    why: dict[str, int] = {}
    for m in cands:
        target = copy / m.path
        original = target.read_bytes()
        try:
            target.write_text(m.apply(sources[m.path]))
            code, first = run_suite(py, copy, xml, extra, timeout)
            failing = sorted(t for t, ok in first.items() if not ok)
            if code == -1:
                reason = "timeout"
            elif code not in (0, 1):
                reason = "breaks collection"
            elif not failing:
                reason = "no test fails"
            else:
                code2, second = run_suite(py, copy, xml, extra, timeout)
                again = sorted(t for t, ok in second.items() if not ok)
                reason = "valid" if code2 in (0, 1) and again == failing else "flaky"
        finally:
            target.write_bytes(original)
        why[reason] = why.get(reason, 0) + 1
        valid += reason == "valid"
    return Row("swe-smith (fresh pytest, whole suite x2)", len(cands), valid,
               time.perf_counter() - started), why


# -- report -----------------------------------------------------------------------------------------

def print_table(title: str, rows: list[Row], notes: list[str]) -> None:
    base = rows[-1].per_minute  # the last row is the baseline
    headers = ["validator", "candidates", "valid tasks", "seconds", "tasks/min", "ratio vs swe-smith"]
    body = [[r.mode, str(r.tried), str(r.valid), f"{r.seconds:.1f}", f"{r.per_minute:.1f}",
             f"{r.per_minute / base:.2f}x" if base > 0 else "inf"] for r in rows]
    _table.print_table(title, headers, body, left={0}, width=120)
    for note in notes:
        print(note)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Validated bug tasks per minute on a real library downloaded from PyPI: FrogNano's "
                    "synthesize (warm runner, covering tests) against a SWE-smith-style loop (fresh "
                    "pytest on the whole suite per candidate, twice for a kept task), on the same "
                    "candidates in the same order.")
    parser.add_argument("--package", default="more-itertools==10.5.0", metavar="NAME==VERSION",
                        help="sdist with a tests/ folder and a flat layout (default more-itertools==10.5.0)")
    parser.add_argument("-n", type=int, default=20, metavar="N",
                        help="tasks FrogNano synthesises; the baseline gets the candidates it tried (default 20)")
    parser.add_argument("--quick", action="store_true", help="smoke run: N=5 (overrides -n)")
    parser.add_argument("--seed", type=int, default=0, help="candidate order (default 0)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder and print it")
    args = parser.parse_args(argv)
    n = 5 if args.quick else args.n

    scratch = Path(tempfile.mkdtemp(prefix="frognano-synth-bench-"))
    try:
        t0 = time.perf_counter()
        root = fetch_library(args.package, scratch)
        py = make_venv(scratch)
        print(f"{args.package}: {root.name} in {scratch}, venv ready in {time.perf_counter() - t0:.1f} s")

        # Green at baseline: run the suite once, deselect what fails (for both validators).
        t0 = time.perf_counter()
        code, results = run_suite(py, root, scratch / "base.xml", [], None)
        suite_s = time.perf_counter() - t0
        if code not in (0, 1) or not results:
            raise SystemExit(f"{args.package}: the suite does not run at baseline (pytest exit {code})")
        failing = sorted(t for t, ok in results.items() if not ok)
        deselect: list[str] = []
        for tid in failing:  # classname tests.test_more.Foo -> tests/test_more.py::Foo::name
            cls, name = tid.split("::", 1)
            parts = cls.split(".")
            for k in range(len(parts), 0, -1):
                if (root / Path(*parts[:k])).with_suffix(".py").exists():
                    mod = "/".join(parts[:k]) + ".py"
                    deselect += ["--deselect", "::".join([mod, *parts[k:], name])]
                    break
        if failing:
            code, results = run_suite(py, root, scratch / "base.xml", deselect, None)
            still = [t for t, ok in results.items() if not ok]
            if still:
                raise SystemExit(f"still failing after deselecting: {still[:5]}")
        print(f"suite: {len(results)} tests, {suite_s:.1f} s per fresh run, {len(failing)} deselected")

        front, skips = run_frognano(root, py, n, args.seed, deselect, scratch / "tasks.jsonl")
        t0 = time.perf_counter()
        stream, sources, ws = candidate_list(root, py, args.seed, deselect)
        cands = list(itertools.islice(stream, front.tried))
        ws.close()
        listing_s = time.perf_counter() - t0
        # Sanity: the baseline gets exactly the candidates FrogNano tried.
        from frognano.synthesis.store import read_tasks
        from frognano.synthesis.validate import unified_diff
        patches = {unified_diff(m.path, sources[m.path], m.apply(sources[m.path])) for m in cands}
        if not all(t.patch in patches for t in read_tasks(scratch / "tasks.jsonl")):
            raise SystemExit("the candidate list differs from the one synthesize validated")
        base, why = run_swe_smith(root, py, cands, sources, deselect, 5 * suite_s + 10, scratch)

        title = (f"Validated tasks per minute: {args.package}, {len(results)} tests, "
                 f"same {front.tried} candidates (seed {args.seed}), python {sys.version.split()[0]}")
        notes = [f"baseline outcomes: {why}",
                 f"frognano rejections: {skips[0]}; its candidate loop {skips[1]:.1f} s of {front.seconds:.1f} s, "
                 f"the rest is setup (for comparison, a separate coverage run + listing the "
                 f"{front.tried} candidates took {listing_s:.1f} s here)",
                 f"deselected at baseline: {failing or 'none'}"]
        loop = Row("  frognano, candidate loop only", front.tried, front.valid, skips[1])
        print_table(title, [front, loop, base], notes)
        ratio = front.per_minute / base.per_minute if base.per_minute > 0 else float("inf")
        print(f"ratio {ratio:.2f}x (target >= 5x)")
        return 0
    finally:
        if args.keep:
            print(f"kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
