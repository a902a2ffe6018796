"""How long ``frognano train --preset tiny`` takes on a busy laptop, and where the time goes.

What it runs
    The tiny preset (``frognano.training.loop.train``, export none) in a fresh run directory,
    first on a quiet machine (the baseline, same session), then with ``--busy`` busy-loop
    processes competing for the cores (a ``stress``-like load: on 2 cores, 2 loops and the run's
    own processes make a load average of about 4).  Each run's phases come from its
    ``metrics.jsonl``: step 0's row records the repositories (repairing the bundled examples),
    synthesis (the held-out tasks and the pool's round 0), the model build and the untrained
    held-out evaluation; the steps and the later evaluations are the rest.

    Printed: one row per phase, quiet and busy seconds and their ratio, then the whole run in
    minutes with the target (<= 5 minutes busy, issue "pure RL from a pretrained base") and the
    load average measured during the busy run.

    python benchmarks/train_busy.py [--busy 2] [--steps N] [--skip-quiet] [--scratch DIR]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

import _table  # benchmarks/_table.py: this script's own folder is on sys.path

TARGET_MINUTES = 5.0


def _spin(stop) -> None:
    while not stop.is_set():
        for _ in range(100_000):
            pass


def run_tiny(run: Path, steps: int | None) -> dict:
    from frognano.training.config import PRESETS, TrainConfig
    from frognano.training.loop import train

    config = TrainConfig(**{**PRESETS["tiny"], "export": "none", **({"steps": steps} if steps else {})})
    started = time.monotonic()
    train(config, run)
    seconds = time.monotonic() - started
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    phases = dict(rows[0].get("phases", {}))
    phases["steps and later evaluations"] = seconds - sum(phases.values())
    return {"seconds": seconds, "phases": phases, "after": rows[-1]["eval"]["resolve_rate"],
            "before": rows[0]["eval"]["resolve_rate"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--busy", type=int, default=2, help="busy-loop processes during the busy run")
    parser.add_argument("--steps", type=int, default=None, help="default: the tiny preset's")
    parser.add_argument("--skip-quiet", action="store_true", help="the busy run alone (no baseline)")
    parser.add_argument("--scratch", type=Path, default=None)
    args = parser.parse_args(argv)
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="frognano-busy-"))
    print(f"scratch: {scratch}", file=sys.stderr)
    quiet = None if args.skip_quiet else run_tiny(scratch / "quiet", args.steps)
    stop = multiprocessing.Event()
    loops = [multiprocessing.Process(target=_spin, args=(stop,), daemon=True) for _ in range(args.busy)]
    for p in loops:
        p.start()
    loads = []
    try:
        started = time.monotonic()
        busy = run_tiny(scratch / "busy", args.steps)
        loads.append(os.getloadavg()[0])
        if time.monotonic() - started > 300:  # the 5-minute average too, once the run lasted that long
            loads.append(os.getloadavg()[1])
    finally:
        stop.set()
        for p in loops:
            p.join(5)
    body = []
    for name in busy["phases"]:
        b = busy["phases"][name]
        q = quiet["phases"].get(name) if quiet else None
        body.append([name, "-" if q is None else f"{q:.1f}", f"{b:.1f}",
                     "-" if not q else f"{b / q:.2f}x", "-", "-"])
    minutes = busy["seconds"] / 60
    body.append(["whole run (minutes)", "-" if quiet is None else f"{quiet['seconds'] / 60:.1f}", f"{minutes:.1f}",
                 "-" if quiet is None else f"{busy['seconds'] / quiet['seconds']:.2f}x", f"<= {TARGET_MINUTES:g}",
                 "yes" if minutes <= TARGET_MINUTES else "NO"])
    body.append(["held-out rate before -> after", "-" if quiet is None else f"{quiet['before']:.2f} -> {quiet['after']:.2f}",
                 f"{busy['before']:.2f} -> {busy['after']:.2f}", "-", "-", "-"])
    _table.print_table(f"frognano train --preset tiny, quiet vs {args.busy} busy loop(s) "
                       f"(load average during the busy run: {', '.join(f'{x:.1f}' for x in loads)})",
                       ["phase (seconds)", "quiet", "busy", "ratio", "target", "met"], body, left={0})
    return 0 if minutes <= TARGET_MINUTES else 1


if __name__ == "__main__":
    raise SystemExit(main())
