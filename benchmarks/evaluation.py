"""Held-out repair rate of the operator search: the README's "Evaluate" table, reproducibly.

What it does
    1. The bundled examples (``examples/calc``, ``inventory``, ``shapes``) each ship with one
       bug.  Each is copied, repaired with ``frognano fix --apply`` (the repair is checked: the
       suite must then be green) and committed to a fresh git repository.
    2. A real library, ``more-itertools==10.5.0`` by default, is downloaded as an sdist from
       PyPI, unpacked, given its own ``.venv`` with pytest (not the library: its flat layout
       makes the tests import the working copy) and committed to git.
    3. ``frognano synth REPOS -o tasks.jsonl -n N --seed S`` synthesises bug tasks.  They are
       held out: the seed (default 1000) is not one training uses (``frognano train`` draws
       with seeds from 0), and the tasks are never trained on.
    4. ``frognano eval tasks.jsonl --search-only --out results.jsonl`` measures the operator
       search on them; its table is printed, and then one markdown table per family (resolve
       rate with its 95% interval, seconds per task) for the README.

Re-running with the same ``--scratch`` reuses what is there (the evaluation resumes from its
results file).  Nothing outside the scratch folder is written.

    python benchmarks/evaluation.py [--scratch DIR] [-n 12] [--library-n 24] [--seed 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = ("calc", "inventory", "shapes")


def frognano(*args: str, check: bool = True, capture: bool = False) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "frognano", *args]
    print("$ frognano " + " ".join(args), file=sys.stderr, flush=True)
    done = subprocess.run(cmd, capture_output=capture, text=True)
    if check and done.returncode not in (0,):
        raise SystemExit(f"frognano {args[0]} exited {done.returncode}\n{done.stderr if capture else ''}")
    return done


def commit(root: Path) -> None:
    if (root / ".git").exists():
        return
    git = ["git", "-C", str(root), "-c", "user.email=bench@frognano", "-c", "user.name=bench"]
    (root / ".gitignore").write_text(".venv/\n__pycache__/\n.pytest_cache/\n*.egg-info/\n")
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "clean"], check=True)


def green_example(name: str, scratch: Path) -> Path:
    dest = scratch / "examples" / name
    if (dest / ".git").exists():
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(REPO / "examples" / name, dest, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    frognano("fix", str(dest), "--apply")
    suite = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=dest,
                           capture_output=True, text=True, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    if suite.returncode != 0:
        raise SystemExit(f"{name}: still failing after frognano fix --apply:\n{suite.stdout[-2000:]}")
    commit(dest)
    return dest


def library(spec: str, scratch: Path) -> Path:
    sys.path.insert(0, str(Path(__file__).parent))
    from synthesis import (
        fetch_library,  # benchmarks/synthesis.py: the same download and unpacking
    )

    marker = scratch / "library.path"
    if marker.exists() and Path(marker.read_text()).is_dir():
        return Path(marker.read_text())
    root = fetch_library(spec, scratch / "library")
    subprocess.run([sys.executable, "-m", "venv", str(root / ".venv")], check=True)
    subprocess.run([str(root / ".venv" / "bin" / "python"), "-m", "pip", "install", "-q", "pytest"], check=True)
    commit(root)
    marker.write_text(str(root))
    return root


def markdown(report: dict) -> str:
    lines = ["| family | tasks | resolved | resolve rate (95% CI) | s / task |", "| --- | ---: | ---: | --- | ---: |"]

    def row(name: str, s: dict) -> str:
        rate = "-" if s["resolve_rate"] is None else (
            f"{s['resolve_rate']:.0%} ({s['resolve_ci'][0]:.0%}–{s['resolve_ci'][1]:.0%})")
        secs = "-" if s["seconds_per_task"] is None else f"{s['seconds_per_task']:.1f}"
        return f"| {name} | {s['tasks']} | {s['resolved']} | {rate} | {secs} |"

    lines.append(row("**all**", report["overall"]))
    lines += [row(name, s) for name, s in report["families"].items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scratch", type=Path, default=None, help="working folder (default: a new temp dir)")
    parser.add_argument("-n", type=int, default=12, help="tasks per bundled example (default 12)")
    parser.add_argument("--library-n", type=int, default=24, help="tasks from the library (default 24)")
    parser.add_argument("--library", default="more-itertools==10.5.0", metavar="NAME==VERSION")
    parser.add_argument("--seed", type=int, default=1000, help="synthesis seed (default 1000: held out)")
    parser.add_argument("--workers", type=int, default=1, help="frognano eval --workers")
    args = parser.parse_args(argv)
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="frognano-eval-"))
    scratch.mkdir(parents=True, exist_ok=True)
    print(f"scratch: {scratch}", file=sys.stderr)
    examples = [green_example(name, scratch) for name in EXAMPLES]
    lib = library(args.library, scratch)
    tasks = scratch / "tasks.jsonl"
    frognano("synth", *map(str, examples), "-o", str(tasks), "-n", str(args.n), "--seed", str(args.seed))
    frognano("synth", str(lib), "-o", str(tasks), "-n", str(args.library_n), "--seed", str(args.seed))
    results = scratch / "results.jsonl"
    frognano("eval", str(tasks), "--search-only", "--out", str(results), "--workers", str(args.workers))
    done = frognano("eval", str(tasks), "--search-only", "--out", str(results), "--json", capture=True)
    report = json.loads(done.stdout)  # resumed from the results file: nothing runs again
    from frognano.training.metrics import latest, summarize

    rows = latest(json.loads(line) for line in results.read_text().splitlines() if line.strip())
    print()
    print(markdown(report))
    print()
    print("| repository | tasks | resolved | resolve rate (95% CI) | s / task |\n| --- | ---: | ---: | --- | ---: |")
    for repo in dict.fromkeys(r["repo"] for r in rows):
        s = summarize([r for r in rows if r["repo"] == repo]).overall.to_json()
        print(markdown({"overall": s, "families": {}}).splitlines()[2].replace("**all**", Path(repo).name))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
