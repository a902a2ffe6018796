"""Quantised export of a checkpoint folder: MLX 4-bit (mlx-lm) or GGUF (llama.cpp's converter).

``export(checkpoint, to, out)`` writes the exported model to ``out`` (through a temporary folder
beside it, so a failure leaves nothing half-written) and measures it: the size on disk, and the
bits per weight counted from the saved tensors themselves (every byte of every tensor,
quantisation scales and biases included, over the number of weights they represent).

mlx-4bit is mlx-lm's own ``convert`` (``convert_mlx``, which ``runtime/gguf.py`` uses too), so
it writes what ``mlx_lm.convert -q`` writes; gguf runs llama.cpp's ``convert_hf_to_gguf.py``
from a llama.cpp checkout or an unpacked llama-cpp-python sdist (``find_gguf_converter``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from .base import ModelError, one_line

TARGETS = ("mlx-4bit", "gguf")

LLAMA_CPP_PYTHON = "0.3.36"  # the llama-cpp-python sdist whose vendored llama.cpp the tests use
GGUF_HELP = (
    "exporting to gguf needs llama.cpp's converter, convert_hf_to_gguf.py (no compiling needed): "
    f"pip download --no-deps --no-binary :all: llama-cpp-python=={LLAMA_CPP_PYTHON} && "
    f"tar xzf llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz, then set LLAMA_CPP_DIR to the unpacked "
    f"llama_cpp_python-{LLAMA_CPP_PYTHON} "
    "(or to a llama.cpp checkout: git clone https://github.com/ggml-org/llama.cpp), "
    "or put convert_hf_to_gguf.py on PATH"
)


@dataclass
class ExportResult:
    size_bytes: int  # every file written, on disk
    bits_per_weight: float
    path: Path  # the folder (mlx-4bit) or the .gguf file


def export(checkpoint: Path, to: str, out: Path, dtype: str | None = None) -> ExportResult:
    """Export the model folder ``checkpoint`` as ``to`` ("mlx-4bit" or "gguf") into ``out``.

    ``dtype`` (mlx-4bit only) casts the unquantised tensors, and so the scales, before
    quantising; None keeps the checkpoint's, as ``mlx_lm.convert -q`` does (see ``convert_mlx``).
    """
    checkpoint, out = Path(checkpoint), Path(out)
    if to not in TARGETS:
        raise UsageError(f"unknown export target {to!r}: expected one of {', '.join(TARGETS)}")
    if not checkpoint.is_dir() or not (checkpoint / "config.json").is_file():
        what = "does not exist" if not checkpoint.exists() else "is not a model folder (no config.json)"
        raise ModelError(f"checkpoint {checkpoint} {what}")
    if to == "mlx-4bit":
        return _export_mlx(checkpoint, out, bits=4, dtype=dtype)
    if dtype is not None:
        raise UsageError("--dtype applies to mlx-4bit; the gguf export writes q8_0")
    return _export_gguf(checkpoint, out)


# -- writing through a temporary folder ---------------------------------------------------------


def _check_free(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"{out} already exists and is not an empty folder")


def _staging(out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    tmp.chmod(0o755)
    return tmp


def _publish(tmp: Path, out: Path) -> None:
    if out.exists():
        out.rmdir()  # empty, checked before
    os.replace(tmp, out)


def disk_size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# -- mlx ----------------------------------------------------------------------------------------


def _export_mlx(checkpoint: Path, out: Path, bits: int, dtype: str | None = None) -> ExportResult:
    _check_free(out)
    tmp = _staging(out)
    try:
        stage = tmp / "model"  # mlx-lm's convert wants to create the folder itself
        convert_mlx(checkpoint, stage, bits=bits, dtype=dtype, what=f"checkpoint {checkpoint}")
        for item in stage.iterdir():
            os.replace(item, tmp / item.name)
        stage.rmdir()
        bpw = safetensors_bits_per_weight(tmp)
        _publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ExportResult(size_bytes=disk_size(out), bits_per_weight=bpw, path=out)


MLX_DTYPES = ("float16", "bfloat16", "float32")


def mlx_float_dtype() -> str:
    """The dtype an unquantised MLX model should have on this machine: float16 where MLX has a
    GPU (Metal, CUDA), which halves the memory at the GPU's speed, and float32 on mlx's CPU
    build, where 16-bit arithmetic is emulated: SmolLM2-135M decodes 48 tokens after a
    300-token prompt in 18.3 s as float16, 7.2 s as bfloat16 and 6.0 s as float32 (2 cores)."""
    from .mlx_cpu import use_fast_blas

    use_fast_blas()
    import mlx.core as mx

    gpu = mx.metal.is_available() or (hasattr(mx, "cuda") and mx.cuda.is_available())
    return "float16" if gpu else "float32"


def convert_mlx(checkpoint: Path, dest: Path, *, bits: int | None = None, group_size: int = 64,
                dtype: str | None = None, what: str | None = None) -> None:
    """mlx-lm's own ``convert`` of the transformers folder ``checkpoint`` into ``dest`` (which
    must not exist): quantised affine ``bits``-bit with ``group_size`` when ``bits`` is given,
    its floating-point tensors cast to ``dtype`` when given.

    By default the tensors keep the checkpoint's dtype, as ``mlx_lm.convert -q`` keeps it, and
    the quantisation scales and biases take that dtype.  That matters for speed, not only size:
    on mlx's CPU build a 4-bit matrix with 16-bit scales (float16 or bfloat16) decodes about ten
    times slower than one with float32 scales (SmolLM2-135M, 16 greedy tokens: 0.57 against
    5.8 tokens/s with bfloat16 scales; one float16 quantized_matmul of 1536x576 takes 98 ms
    against 0.66 ms), while on Metal 16-bit scales are the usual, smaller choice.
    ``config.json`` is rewritten to name the dtype the tensors really have (mlx-lm keeps the
    checkpoint's stale ``dtype`` when it casts).
    """
    if dtype is not None and dtype not in MLX_DTYPES:
        raise UsageError(f"dtype {dtype!r}: expected one of {', '.join(MLX_DTYPES)}")
    what = what or str(checkpoint)
    from .mlx_cpu import use_fast_blas

    use_fast_blas()
    try:
        from mlx_lm.convert import convert
    except ImportError as exc:
        kind = f"mlx-{bits}bit" if bits else "mlx"
        raise UsageError(f"converting to {kind} needs mlx-lm ({exc}): pip install 'frognano[mlx]'") from None
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # mlx-lm prints its own summary
            convert(str(checkpoint), str(dest), quantize=bits is not None, q_bits=bits, q_group_size=group_size,
                    dtype=dtype)
    except Exception as exc:
        shutil.rmtree(dest, ignore_errors=True)
        raise ModelError(f"{what}: mlx-lm cannot convert it: {one_line(exc)}") from None
    _settle_dtype(dest)


def _settle_dtype(folder: Path) -> None:
    """Make ``config.json``'s dtype fields name the dtype of the saved floating-point tensors."""
    names = {"F16": "float16", "BF16": "bfloat16", "F32": "float32"}
    found = {names[info["dtype"]] for file in folder.glob("*.safetensors")
             for info in _safetensors_header(file).values() if info["dtype"] in names}
    if len(found) != 1:
        return  # none, or mixed on purpose: nothing single to name
    [dtype] = found
    path = folder / "config.json"
    config = json.loads(path.read_text())
    changed = False
    for key in ("dtype", "torch_dtype"):
        if key in config and config[key] != dtype:
            config[key] = dtype
            changed = True
    if "dtype" not in config and "torch_dtype" not in config:
        config["dtype"], changed = dtype, True
    if changed:
        path.write_text(json.dumps(config, indent=4, sort_keys=True) + "\n")


def _safetensors_header(path: Path) -> dict:
    with path.open("rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header


def safetensors_bits_per_weight(folder: Path) -> float:
    """Bits of every saved tensor over the weights they stand for.

    A quantised matrix is stored as packed integers plus ``.scales`` (and ``.biases``) with one
    entry per group; it stands for ``scales.numel() * group_size`` weights.
    """
    config = json.loads((folder / "config.json").read_text())
    quant = config.get("quantization") or config.get("quantization_config") or {}
    tensors: dict[str, tuple[str, list[int], int]] = {}
    for file in sorted(folder.glob("*.safetensors")):
        for name, info in _safetensors_header(file).items():
            start, end = info["data_offsets"]
            tensors[name] = (info["dtype"], info["shape"], end - start)
    bits = params = 0
    for name, (_, shape, nbytes) in tensors.items():
        bits += nbytes * 8
        numel = 1
        for d in shape:
            numel *= d
        if name.endswith((".scales", ".biases")):
            continue  # counted in bits above, stand for no weights of their own
        scales = tensors.get(name.rsplit(".", 1)[0] + ".scales") if name.endswith(".weight") else None
        if scales is not None:
            layer = name.rsplit(".", 1)[0]
            override = quant.get(layer) if isinstance(quant.get(layer), dict) else {}
            group = override.get("group_size", quant.get("group_size", 64))
            n_scales = 1
            for d in scales[1]:
                n_scales *= d
            params += n_scales * group
        else:
            params += numel
    if params == 0:
        raise UsageError(f"no weights found in {folder}")
    return bits / params


# -- gguf ---------------------------------------------------------------------------------------


def find_gguf_converter() -> list[str] | None:
    """The command that runs llama.cpp's ``convert_hf_to_gguf.py``, or None when there is none."""
    candidates = []
    if os.environ.get("LLAMA_CPP_DIR"):
        # A llama.cpp checkout, or an unpacked llama-cpp-python sdist, which vendors one.
        root = Path(os.environ["LLAMA_CPP_DIR"]).expanduser()
        candidates += [root / "convert_hf_to_gguf.py", root / "vendor" / "llama.cpp" / "convert_hf_to_gguf.py"]
    for name in ("convert_hf_to_gguf.py", "convert_hf_to_gguf", "convert-hf-to-gguf"):
        found = shutil.which(name)
        if found:
            candidates.append(Path(found))
    for exe in ("llama-cli", "llama-server", "llama-quantize"):  # a llama.cpp checkout with its binaries on PATH
        found = shutil.which(exe)
        if found:
            bin_dir = Path(found).resolve().parent
            candidates.extend(bin_dir / up / "convert_hf_to_gguf.py" for up in (".", "..", "../.."))
    for cand in candidates:
        if cand.is_file():
            # Run .py scripts with this interpreter (it has torch and the gguf package); an
            # installed entry point runs as itself.
            return [sys.executable, str(cand)] if cand.suffix == ".py" else [str(cand)]
    import importlib.util

    if importlib.util.find_spec("convert_hf_to_gguf") is not None:
        return [sys.executable, "-m", "convert_hf_to_gguf"]
    return None


def _export_gguf(checkpoint: Path, out: Path, outtype: str = "q8_0") -> ExportResult:
    converter = find_gguf_converter()
    if converter is None:
        raise UsageError(GGUF_HELP)
    target = out if out.suffix == ".gguf" else out / f"{checkpoint.name}-{outtype}.gguf"
    if target.exists():
        raise UsageError(f"{target} already exists")
    if out.suffix != ".gguf":
        _check_free(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.part")
    cmd = [*converter, str(checkpoint), "--outfile", str(tmp), "--outtype", outtype]
    # No bytecode written into the llama.cpp folder: it may be a read-only or shared checkout.
    # The converter puts its own gguf-py first on sys.path (the one it was written against),
    # and falls back to the installed gguf package where a folder has none.
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            tail = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-1:])[:300]
            raise UsageError(f"convert_hf_to_gguf failed on {checkpoint} (exit {proc.returncode}): {tail}")
        bpw = gguf_bits_per_weight(tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return ExportResult(size_bytes=disk_size(target), bits_per_weight=bpw, path=target)


def gguf_bits_per_weight(path: Path) -> float:
    try:
        from gguf import GGUFReader
    except ImportError as exc:
        raise UsageError(f"measuring a gguf file needs the gguf package ({exc}): pip install gguf") from None
    reader = GGUFReader(str(path))
    bits = sum(int(t.n_bytes) * 8 for t in reader.tensors)
    params = sum(int(t.n_elements) for t in reader.tensors)
    if params == 0:
        raise UsageError(f"no tensors in {path}")
    return bits / params
