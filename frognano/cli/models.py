"""``frognano model tiny|import`` and ``frognano export``: random models, GGUF in, quantised out.

Registered on the main group by ``main.py``; the machinery (tokenizers, transformers, mlx-lm,
llama.cpp's converter) is imported inside each command, so ``frognano --help`` stays fast.
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
    """Make local models: import a GGUF file, or a small random one for tests and smoke runs."""


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


@model_group.command("import", short_help="Convert a GGUF file (llama.cpp, Ollama) into a model folder.")
@click.argument("source", metavar="FILE.gguf", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("out", type=click.Path(file_okay=False, path_type=Path))
@click.option("--to", "to", type=click.Choice(["torch", "mlx", "mlx-4bit"]), default="torch", show_default=True,
              help="torch: a transformers folder, float32.  mlx: an mlx-lm folder, float16 where MLX has "
                   "a GPU, float32 on its CPU build (3x faster there).  "
                   "mlx-4bit: mlx-lm affine 4-bit, group size 64.")
def import_command(source: Path, out: Path, to: str) -> None:
    """Convert the GGUF file FILE.gguf into the model folder OUT (which must not exist, or be empty).

    The weights are de-quantised by transformers' GGUF reader (the file's architecture must be
    one it reads: llama, qwen2, qwen3, gemma3, ...); the tokenizer, its chat template and the
    generation config come along.  mlx and mlx-4bit are converted from those de-quantised
    weights by mlx-lm, so a quantised GGUF is never re-quantised from its own blocks.  Needs
    torch, transformers and gguf (and mlx-lm for the mlx targets); nothing is downloaded.

    Load the result with --model torch:OUT or --model mlx:OUT.  To use a GGUF without a
    folder of your own, give it directly: --model torch:FILE.gguf (or mlx:FILE.gguf) converts
    it once into FrogNano's cache (`frognano cache` lists it) and loads it from there.

    Ollama keeps its GGUFs as ~/.ollama/models/blobs/sha256-* (the manifests under
    ~/.ollama/models/manifests name the model's blob).
    """
    from ..runtime.gguf import import_gguf

    try:
        result = import_gguf(source, out, to)
    except FrogNanoError as exc:
        fail(exc)
    click.echo(f"wrote {result.path}: {result.architecture} as {to}, {human_size(result.size_bytes)} "
               f"({result.size_bytes} bytes) in {result.seconds:.1f} s")


@click.command("export")
@click.argument("checkpoint", type=click.Path(path_type=Path))
@click.option("--to", "to", type=click.Choice(["mlx-4bit", "gguf"]), required=True,
              help="mlx-4bit: mlx-lm affine 4-bit, group size 64.  gguf: llama.cpp's converter, q8_0.")
@click.argument("out", type=click.Path(path_type=Path))
@click.option("--dtype", type=click.Choice(["float16", "bfloat16", "float32"]), default=None,
              help="mlx-4bit: cast the unquantised tensors (and so the scales) first.  Default: keep the "
                   "checkpoint's, as mlx_lm.convert -q does (on mlx's CPU build 16-bit scales decode ~10x "
                   "slower than float32 ones; on Metal, 16-bit ones are the usual, smaller choice).")
def export_command(checkpoint: Path, to: str, out: Path, dtype: str | None) -> None:
    """Export the model folder CHECKPOINT, quantised, to OUT; print its size and bits per weight.

    gguf needs llama.cpp's convert_hf_to_gguf.py: set LLAMA_CPP_DIR to a llama.cpp checkout or to
    an unpacked llama-cpp-python sdist (pip download --no-deps --no-binary :all:
    llama-cpp-python==0.3.36, then tar xzf it).
    """
    from ..runtime.export import export

    try:
        result = export(checkpoint, to, out, dtype=dtype)
    except FrogNanoError as exc:
        fail(exc)
    click.echo(f"{result.path}: {human_size(result.size_bytes)} on disk ({result.size_bytes} bytes), "
               f"{result.bits_per_weight:.2f} bits per weight")
