"""Does the pipeline learn?  E1 (held-out rate after vs before) and E2 (frontier vs uniform sampler).

What it runs
    ``frognano.training.loop.train`` with the ``tiny`` preset (a random tiny Qwen3 from scratch,
    LoRA, constrained decoding, the ``candidates``/``apply``/``submit`` tools with 2 candidates
    listed and ``submit`` offered once a file is changed; training tasks synthesised from
    repaired copies of the bundled examples with the run's seed, held-out tasks with seed
    1000, never trained on), once per seed with the frontier sampler and once
    with the uniform sampler, each in its own run directory under ``--scratch``.  Every run
    evaluates the held-out tasks before training (step 0) and every ``eval_every`` steps
    through the serving harness: the preset's ``eval_samples`` episodes per task, sampled with
    the same seeds at every evaluation (so before and after differ by the policy alone).

    E1  held-out resolve rate after training vs before, frontier runs, mean ± sd over seeds;
        target >= 2x the untrained rate.
    E2  frontier vs uniform at equal rollouts (same steps, tasks per step and group size):
        the area under the held-out curve (trapezoid over steps, divided by the steps: a mean
        rate), the rate at an early budget (the first evaluation after step 0), and the mean
        fraction of zero-variance groups (DAPO refills them).

    python benchmarks/learning.py [--seeds 0 1 2] [--steps N] [--scratch DIR]   # the preset's steps
    python benchmarks/learning.py --quick            # one seed, 6 steps: a smoke run
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _table  # benchmarks/_table.py: this script's own folder is on sys.path


def run_one(scratch: Path, seed: int, sampler: str, steps: int, eval_every: int) -> dict:
    from frognano.training.config import PRESETS, TrainConfig
    from frognano.training.loop import train

    run = scratch / f"{sampler}-seed{seed}"
    config = TrainConfig(**{**PRESETS["tiny"], "steps": steps, "eval_every": eval_every, "seed": seed,
                            "sampler": sampler, "export": "none"})
    started = time.monotonic()
    result = train(config, run, resume=(run / "config.json").exists())
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    curve = [(r["step"], r["eval"]["resolve_rate"]) for r in rows if "eval" in r]
    zero = [r["zero_variance_fraction"] for r in rows if r["step"] > 0]
    area = sum((b[0] - a[0]) * (a[1] + b[1]) / 2 for a, b in zip(curve, curve[1:])) / max(1, curve[-1][0])
    return {"seed": seed, "sampler": sampler, "before": curve[0][1], "after": curve[-1][1],
            "early": curve[1][1] if len(curve) > 1 else curve[0][1], "auc": area,
            # The run's own clock (its metrics), so a rerun that resumes a finished run reports it too.
            "zero_var": statistics.mean(zero) if zero else 0.0,
            "seconds": max([r.get("seconds", 0.0) for r in rows] + [time.monotonic() - started]),
            "final": str(result.final), "run": str(run)}


def context_blind_ceiling(run: Path) -> dict:
    """What a policy that ignores the task can reach on ``run``'s held-out tasks: the resolve rate
    of the scripted episode "apply k, then submit" for each listed index k (the best k is the
    ceiling of any context-blind policy: the tiny random model starts nearly context-blind), and
    the share of tasks where some listed candidate fixes the bug (a policy that reads the task)."""
    from frognano.training.config import TrainConfig
    from frognano.training.loop import _Envs
    from frognano.training.rollout import candidates_for
    from frognano.training.tasks import load_tasks

    config = TrainConfig.from_dict(json.loads((run / "config.json").read_text()))
    tasks, _ = load_tasks(run / "heldout.jsonl")
    envs = _Envs(config, None)
    hits = [0] * config.max_candidates
    some = 0
    try:
        for task in tasks:
            env = envs.get(task)
            env.engine.settings = envs.settings
            state = env.reset(task)
            listed = candidates_for(env, state).candidates[:config.max_candidates]
            fixed = [env.reward(state, c.patch).resolved for c in listed]
            hits = [h + f for h, f in zip(hits, fixed + [False] * len(hits))]
            some += any(fixed)
    finally:
        envs.close()
    n = max(1, len(tasks))
    return {"per_index": [h / n for h in hits], "best_index": max(hits) / n, "reads_the_task": some / n}


def _ms(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def _ratio(value: float, baseline: float) -> str:
    if baseline > 0:
        return f"{value / baseline:.2f}x"
    return "n/a (both 0)" if value == 0 else "from 0"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=None, help="default: the tiny preset's")
    parser.add_argument("--eval-every", type=int, default=None, help="default: the tiny preset's")
    parser.add_argument("--scratch", type=Path, default=None)
    parser.add_argument("--quick", action="store_true", help="one seed, 6 steps, evaluation every 3")
    args = parser.parse_args(argv)
    from frognano.training.config import PRESETS

    if args.quick:
        args.seeds, args.steps, args.eval_every = args.seeds[:1], 6, 3
    args.steps = args.steps or PRESETS["tiny"]["steps"]
    args.eval_every = args.eval_every or PRESETS["tiny"]["eval_every"]
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="frognano-learning-"))
    print(f"scratch: {scratch}", file=sys.stderr)
    results = [run_one(scratch, seed, sampler, args.steps, args.eval_every)
               for seed in args.seeds for sampler in ("frontier", "uniform")]
    frontier = [r for r in results if r["sampler"] == "frontier"]
    uniform = [r for r in results if r["sampler"] == "uniform"]
    before = [r["before"] for r in frontier]
    after = [r["after"] for r in frontier]
    # Learning means a positive rate after training, at least twice the untrained one (from 0,
    # any positive rate is "more than 2x"; 0 after training is no learning, whatever before was).
    met = statistics.mean(after) > 0 and statistics.mean(after) >= 2 * statistics.mean(before)
    body = [
        ["E1", "held-out resolve rate, after training", _ms(after), "before: " + _ms(before),
         _ratio(statistics.mean(after), statistics.mean(before)), ">= 2x", "yes" if met else "NO"],
    ]
    for name, key in (("area under the held-out curve", "auc"), ("rate at the early budget", "early"),
                      ("zero-variance groups (mean)", "zero_var")):
        f, u = [r[key] for r in frontier], [r[key] for r in uniform]
        body.append(["E2", f"{name}: frontier vs uniform", _ms(f), "uniform: " + _ms(u),
                     _ratio(statistics.mean(f), statistics.mean(u)), "-", "-"])
    # E1's target, set against what is reachable: a policy that never reads the task (the random
    # tiny model starts nearly so) cannot beat its best fixed index.
    ceiling = context_blind_ceiling(Path(frontier[0]["run"]))
    body.append(["E1", "ceiling: context-blind policy (apply k, submit; best k)", f"{ceiling['best_index']:.2f}",
                 "per k: " + " ".join(f"{v:.2f}" for v in ceiling["per_index"]),
                 _ratio(ceiling["best_index"], statistics.mean(before)), "-", "-"])
    body.append(["E1", "ceiling: a policy that reads the task (some listed fix)", f"{ceiling['reads_the_task']:.2f}",
                 "-", _ratio(ceiling["reads_the_task"], statistics.mean(before)), "-", "-"])
    minutes = statistics.mean(r["seconds"] for r in results) / 60
    for r in results:
        print(f"{r['sampler']:>8} seed {r['seed']}: held-out {r['before']:.3f} -> {r['after']:.3f}, "
              f"zero-variance {r['zero_var']:.2f}, {r['seconds'] / 60:.1f} min", file=sys.stderr)
    _table.print_table(f"Learning on the tiny preset ({len(args.seeds)} seed(s), {args.steps} steps; "
                       f"{minutes:.1f} min per run)",
                       ["", "measure", "value", "baseline", "ratio", "target", "met"], body, left={0, 1, 3})
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
