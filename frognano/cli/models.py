"""``frognano model tiny`` and ``frognano export``: make a small random model, quantise a checkpoint.

Registered on the main group by ``main.py``; the machinery (tokenizers, mlx-lm, llama.cpp's
converter) is imported inside each command, so ``frognano --help`` stays fast.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

import click

from ..errors import FrogNanoError


def fail(exc: FrogNanoError) -> NoReturn:
    """``error: <message>`` on stderr, exit with the error's code (as ``main._fail`` does)."""
    from rich.markup import escape

    from .render import stderr_console

    stderr_console().print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True)
    sys.exit(exc.exit_code)


def human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


@click.group("model")
def model_group() -> None:
    """Make local models for tests and smoke runs."""


@model_group.command("tiny")
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["mlx", "torch"]), default="torch", show_default=True,
              help="Weights for this backend: float16 for mlx, float32 for torch (both backends load either).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random weights.")
def tiny(out: Path, fmt: str, seed: int) -> None:
    """Write a small random Qwen3 model (with a locally trained tokenizer) to OUT.

    The folder loads with mlx_lm.load and transformers' from_pretrained, and as
    --model mlx:OUT or --model torch:OUT.  Nothing is downloaded.
    """
    from ..runtime.tiny import TinyArgs, build_tiny

    try:
        path = build_tiny(out, fmt, seed=seed)  # type: ignore[arg-type]
    except FrogNanoError as exc:
        fail(exc)
    args = TinyArgs()
    click.echo(
        f"wrote a tiny random qwen3 model ({args.num_hidden_layers} layers, hidden {args.hidden_size}, "
        f"vocab {args.vocab_size}, {fmt} weights, seed {seed}) to {path}"
    )


@click.command("export")
@click.argument("checkpoint", type=click.Path(path_type=Path))
@click.option("--to", "to", type=click.Choice(["mlx-4bit", "gguf"]), required=True,
              help="mlx-4bit: mlx-lm affine 4-bit, group size 64.  gguf: llama.cpp's converter, q8_0.")
@click.argument("out", type=click.Path(path_type=Path))
def export_command(checkpoint: Path, to: str, out: Path) -> None:
    """Export the model folder CHECKPOINT, quantised, to OUT; print its size and bits per weight."""
    from ..runtime.export import export

    try:
        result = export(checkpoint, to, out)
    except FrogNanoError as exc:
        fail(exc)
    click.echo(f"{result.path}: {human_size(result.size_bytes)} on disk ({result.size_bytes} bytes), "
               f"{result.bits_per_weight:.2f} bits per weight")
