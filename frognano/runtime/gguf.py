"""GGUF in: a llama.cpp or Ollama model file turned into a folder FrogNano's backends load.

``import_gguf(source, out, to)`` writes one of three folders (through a temporary folder beside
``out``, so a failure leaves nothing half-written):

- ``"torch"``: a transformers folder, float32, de-quantised by transformers' own GGUF reader,
  with the tokenizer, its chat template and the generation config;
- ``"mlx"``: an mlx-lm folder, not quantised, float16 where MLX has a GPU and float32 on its
  CPU build (``export.mlx_float_dtype``: 16-bit arithmetic there is emulated, 3x slower);
- ``"mlx-4bit"``: an mlx-lm affine 4-bit folder, group size 64, its scales and biases float32
  as ``mlx_lm.convert -q`` leaves them for float32 weights (16-bit ones decode ~10x slower on
  mlx's CPU build; ``frognano export --dtype float16`` makes those where Metal wants them).

Both MLX targets are converted from the de-quantised float32 weights (mlx-lm cannot read
GGUF's quantised blocks): a Q4 GGUF made MLX 4-bit is quantised a second time, from real
numbers, by mlx-lm's own quantiser, never by reinterpreting one format's blocks as another's.

``cached_import(source, kind)`` is what ``--model torch:FILE.gguf`` and ``mlx:FILE.gguf`` load:
the folder is made once, under ``<cache>/models/<stem>-<sha256>-<kind>/``, keyed by the
file's content.  Each folder keeps a record (``frognano-import.json``) of the file it came from
with its size and modification time, so a later load finds its hash there instead of reading
the whole file again; a file changed since (another size or time) is hashed again.

``read_header(path)`` checks a file before any conversion, from its header alone: the magic
bytes, that every tensor lies inside the file (a truncated download), and that transformers
reads its architecture.  Each failure is one line naming the file.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import struct
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import UsageError
from ..paths import cache_root
from .base import ModelError, one_line

log = logging.getLogger(__name__)

TARGETS = ("torch", "mlx", "mlx-4bit")
MAGIC = b"GGUF"
RECORD = "frognano-import.json"  # in a cached import: the file it came from, and its hash
MODELS = "models"  # the cache's folder of imported GGUFs (``frognano cache`` lists it)

_INSTALL = "pip install 'frognano[torch]' gguf"  # what reading a GGUF into a folder needs


@dataclass
class GGUFHeader:
    """What a GGUF file's header says, and where its tensor data ends."""

    version: int
    architecture: str
    name: str | None  # general.name, when the file has one
    tensor_count: int
    data_end: int  # the byte just past the last tensor
    file_size: int


@dataclass
class ImportResult:
    path: Path  # the folder written
    seconds: float  # wall time of the whole import
    architecture: str  # general.architecture: "llama", "qwen2", ...
    size_bytes: int  # every file written, on disk
    to: str  # "torch", "mlx" or "mlx-4bit"


class TargetTaken(UsageError):
    """``out`` is not free (or another process filled it while this one converted)."""


# -- the header ---------------------------------------------------------------------------------

# Sizes of GGUF's fixed-size metadata value types (gguf.GGUFValueType), by type id.
_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY = 8, 9


class _Truncated(Exception):
    pass


class _Header:
    """A little-endian (or big-endian) reader over the file's header that notices its end."""

    def __init__(self, f: BinaryIO, endian: str, size: int) -> None:
        self.f, self.endian, self.size = f, endian, size

    def take(self, n: int) -> bytes:
        if self.f.tell() + n > self.size:  # also keeps a corrupt length from allocating it
            raise _Truncated
        data = self.f.read(n)
        if len(data) != n:
            raise _Truncated
        return data

    def u32(self) -> int:
        return struct.unpack(self.endian + "I", self.take(4))[0]

    def u64(self) -> int:
        return struct.unpack(self.endian + "Q", self.take(8))[0]

    def string(self) -> bytes:
        return self.take(self.u64())

    def skip(self, n: int) -> None:
        if self.f.tell() + n > self.size:
            raise _Truncated
        self.f.seek(n, os.SEEK_CUR)

    def value(self, vtype: int, keep: bool) -> Any:
        """One metadata value; arrays and values not kept are skipped, never parsed."""
        if vtype == _STRING:
            text = self.string()
            return text.decode("utf-8", "replace") if keep else None
        if vtype == _ARRAY:
            etype, count = self.u32(), self.u64()
            if etype in _SCALAR_SIZES:
                self.skip(_SCALAR_SIZES[etype] * count)
            else:
                for _ in range(count):
                    self.value(etype, False)
            return None
        if vtype not in _SCALAR_SIZES:
            raise ValueError(f"unknown metadata value type {vtype}")
        raw = self.take(_SCALAR_SIZES[vtype])
        if not keep:
            return None
        fmt = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}[vtype]
        return struct.unpack(self.endian + fmt, raw)[0]


def _tensor_nbytes(ggml_type: int, dims: list[int]) -> int:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    except (ValueError, KeyError):
        raise ValueError(f"unknown tensor type {ggml_type} (newer than this gguf package?)") from None
    n = 1
    for d in dims:
        n *= d
    return n // block * size


def read_header(path: Path) -> GGUFHeader:
    """Check that ``path`` is a whole GGUF file and read its header (see the module docstring)."""
    path = Path(path)
    if not path.exists():
        raise ModelError(f"{path}: no such file")
    if path.is_dir():
        raise ModelError(f"{path} is a folder, not a GGUF file")
    size = path.stat().st_size
    with path.open("rb") as f:
        magic = f.read(4)
        if magic != MAGIC:
            raise ModelError(f"{path} is not a GGUF file (it starts with {magic!r}, not {MAGIC!r})")
        try:
            import gguf  # noqa: F401 - the tensor types' sizes are its tables
        except ImportError:
            raise ModelError(f"{path}: reading GGUF files needs the gguf package: pip install gguf") from None
        try:
            return _parse(_Header(f, "<", size), path, size)
        except _Truncated:
            raise ModelError(f"{path} is truncated: its header runs past the end of the file "
                             f"({size} bytes); copy or download it again") from None
        except (ValueError, UnicodeDecodeError, OverflowError) as exc:
            raise ModelError(f"{path} is not a readable GGUF file: {one_line(exc)}") from None


def _parse(h: _Header, path: Path, size: int) -> GGUFHeader:
    version = h.u32()
    if version & 0xFFFF == 0:  # written on a big-endian machine: the version reads byte-swapped
        h.endian = ">"
        version = struct.unpack(">I", struct.pack("<I", version))[0]
    if version < 2:
        raise ValueError(f"GGUF version {version} is too old (llama.cpp writes 3)")
    tensor_count, kv_count = h.u64(), h.u64()
    wanted = {"general.architecture", "general.name", "general.alignment"}
    fields: dict[str, Any] = {}
    for _ in range(kv_count):
        key = h.string().decode("utf-8", "replace")
        vtype = h.u32()
        value = h.value(vtype, key in wanted)
        if key in wanted:
            fields[key] = value
    tensors = []
    for _ in range(tensor_count):
        h.string()  # the tensor's name
        dims = [h.u64() for _ in range(h.u32())]
        ggml_type, offset = h.u32(), h.u64()
        tensors.append((offset, _tensor_nbytes(ggml_type, dims)))
    align = fields.get("general.alignment") or 32
    start = -(-h.f.tell() // align) * align  # the data begins at the next multiple of the alignment
    end = start + max((off + n for off, n in tensors), default=0)
    if end > size:
        raise ModelError(f"{path} is truncated: its tensors need {end} bytes, the file has {size} "
                         f"({end - size} missing); copy or download it again")
    architecture = fields.get("general.architecture")
    if not isinstance(architecture, str) or not architecture:
        raise ValueError("it names no general.architecture")
    return GGUFHeader(version, architecture, fields.get("general.name"), tensor_count, end, size)


def supported_architectures() -> list[str]:
    """The GGUF architectures this transformers reads (its own table)."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    return sorted(a for a in GGUF_SUPPORTED_ARCHITECTURES if a not in ("general", "tokenizer"))


# llama.cpp's names that transformers maps onto one of its own (load_gguf_checkpoint does the same).
_ALIASES = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gpt-oss": "gpt_oss", "minimax-m2": "minimax_m2",
            "t5encoder": "t5"}


def _unsupported(path: Path, architecture: str) -> ModelError:
    import transformers

    return ModelError(
        f"{path}: architecture {architecture!r} cannot be loaded by transformers {transformers.__version__} "
        f"(its GGUF reader knows {', '.join(supported_architectures())})"
    )


def check_architecture(path: Path, header: GGUFHeader) -> None:
    try:
        known = supported_architectures()
    except ImportError:
        raise ModelError(f"{path}: importing a GGUF needs transformers and torch: {_INSTALL}") from None
    if header.architecture not in known and _ALIASES.get(header.architecture) not in known:
        raise _unsupported(path, header.architecture)


# -- importing into a folder --------------------------------------------------------------------


def import_gguf(source: Path, out: Path, to: str = "torch") -> ImportResult:
    """Convert the GGUF file ``source`` into the model folder ``out`` (see the module docstring)."""
    return _import(Path(source), Path(out), to)


def _import(source: Path, out: Path, to: str, record: dict[str, Any] | None = None,
            header: GGUFHeader | None = None) -> ImportResult:
    if to not in TARGETS:
        raise UsageError(f"unknown import target {to!r}: expected one of {', '.join(TARGETS)}")
    started = time.perf_counter()
    header = header or read_header(source)
    check_architecture(source, header)
    if to != "torch" and importlib.util.find_spec("mlx_lm") is None:  # said before the slow half
        raise UsageError(f"importing to {to} needs mlx-lm: pip install 'frognano[mlx]'")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise TargetTaken(f"{out} already exists and is not an empty folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    # Held while this import writes: `frognano cache clean` leaves a locked staging folder alone.
    lock = os.open(staging, os.O_RDONLY)
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        model = staging / "model"  # what becomes ``out``, renamed in one step
        if to == "torch":
            _write_torch(source, header, model)
        else:
            hf = staging / "hf"  # the de-quantised float32 weights the MLX folder is made from
            _write_torch(source, header, hf)
            from .export import convert_mlx, mlx_float_dtype

            if to == "mlx":
                convert_mlx(hf, model, dtype=mlx_float_dtype(), what=str(source))
            else:  # 4-bit from float32, scales float32: as `mlx_lm.convert -q` of the same folder
                convert_mlx(hf, model, bits=4, what=str(source))
        if record is not None:
            (model / RECORD).write_text(json.dumps(record, indent=2) + "\n")
        model.chmod(0o755)
        if out.exists():
            with contextlib.suppress(OSError):
                out.rmdir()  # empty, checked above; filled meanwhile: the rename below says so
        try:
            os.replace(model, out)
        except OSError as exc:
            raise TargetTaken(f"{out} was filled by someone else while this import ran ({exc.strerror})") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        os.close(lock)
    from .export import disk_size

    return ImportResult(path=out, seconds=time.perf_counter() - started, architecture=header.architecture,
                        size_bytes=disk_size(out), to=to)


_quiet_lock = threading.Lock()


@contextlib.contextmanager
def _quiet(transformers: Any) -> Iterator[None]:
    """No progress bars while transformers reads the GGUF and writes the folder: its own (as
    ``torch.py`` silences them) and the plain tqdm of its GGUF reader, which ignores that switch."""
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    with _quiet_lock:
        bars = transformers.utils.logging.is_progress_bar_enabled()
        transformers.utils.logging.disable_progress_bar()
        plain = getattr(gguf_utils, "tqdm", None)
        if plain is not None:
            gguf_utils.tqdm = functools.partial(plain, disable=True)
        try:
            with _parsed_once():
                yield
        finally:
            if plain is not None:
                gguf_utils.tqdm = plain
            if bars:
                transformers.utils.logging.enable_progress_bar()


@contextlib.contextmanager
def _parsed_once() -> Iterator[None]:
    """Within one import, each GGUF file is parsed once and gguf's tensor-name map is built once.

    transformers reads the file three times (tokenizer, config, weights: its reader walks a
    49k-token vocabulary field by field, 3.8 s each time for SmolLM2 on 2 cores) and builds
    the name map again for every module of the model (397 times for SmolLM2, 21 ms each).
    Both are pure functions of their arguments for the length of an import (the reader maps
    the file read-only), so they are memoised while ``_quiet``'s lock is held, through the
    ``gguf`` module's attributes, which transformers looks up at each call.  An import went
    from 31 s to about half that."""
    import gguf

    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict[tuple[str, str], Any] = {}

    def read(path: Any, mode: str = "r") -> Any:
        key = (os.fspath(path), mode)
        if key not in readers:
            readers[key] = reader(path, mode)
        return readers[key]

    gguf.GGUFReader = read
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader, name_map


def _write_torch(source: Path, header: GGUFHeader, dest: Path) -> None:
    """transformers' de-quantised load of ``source``, saved as a float32 folder ``dest``."""
    try:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise ModelError(f"{source}: importing a GGUF needs torch and transformers ({exc}): "
                         f"{_INSTALL}") from None
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    dtype_arg = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"  # renamed in 4.56
    folder, name = str(source.parent), source.name
    try:
        with _quiet(transformers):
            tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
            model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, **{dtype_arg: torch.float32})
            # The weights are plain float32 now; transformers still marks the model as GGUF
            # quantised and refuses to save it until that mark is gone.
            model.hf_quantizer = None
            if hasattr(model.config, "quantization_config"):
                del model.config.quantization_config
            model.save_pretrained(dest)
            tokenizer.save_pretrained(dest)
    except ValueError as exc:
        if "not supported" in str(exc) and header.architecture in str(exc):
            raise _unsupported(source, header.architecture) from None
        raise ModelError(f"{source}: transformers cannot load it: {one_line(exc)}") from None
    except ImportError as exc:  # transformers' GGUF reader wants gguf (and torch) at a version
        raise ModelError(f"{source}: transformers cannot read GGUF here ({one_line(exc)}): {_INSTALL}") from None
    except (OSError, RuntimeError, KeyError, TypeError, AttributeError, NotImplementedError) as exc:
        raise ModelError(f"{source}: transformers cannot load it: {one_line(exc)}") from None


# -- the cache: --model torch:FILE.gguf -----------------------------------------------------------


def is_gguf_path(path: Path) -> bool:
    """Whether a model spec names a GGUF file: by its suffix, or by its magic bytes (Ollama's
    blobs, ``~/.ollama/models/blobs/sha256-...``, have no suffix)."""
    if path.suffix.lower() == ".gguf":
        return True
    if not path.is_file():
        return False
    try:
        with path.open("rb") as f:
            return f.read(4) == MAGIC
    except OSError:
        return False


def _fingerprint(path: Path) -> dict[str, Any]:
    st = path.stat()
    return {"source": os.path.realpath(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _remembered_sha256(models: Path, fingerprint: dict[str, Any]) -> str | None:
    """The hash an earlier import recorded for this very file (same path, size and time)."""
    for record in models.glob(f"*/{RECORD}"):
        with contextlib.suppress(OSError, ValueError):
            data = json.loads(record.read_text())
            if isinstance(data, dict) and all(data.get(k) == v for k, v in fingerprint.items()):
                sha = data.get("sha256")
                if isinstance(sha, str) and len(sha) == 64:
                    return sha
    return None


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def cached_folder_name(source: Path, sha256: str, kind: str) -> str:
    stem = "".join(c if c.isalnum() or c in "._-" else "_" for c in source.stem) or "model"
    return f"{stem[:60]}-{sha256[:16]}-{kind}"


def cached_import(source: Path, kind: str) -> Path:
    """The cache's folder of ``source`` converted for backend ``kind`` ("torch" or "mlx"),
    converted now if it is not there yet (see the module docstring)."""
    source = Path(source).expanduser()
    if kind not in ("torch", "mlx"):
        raise UsageError(f"a GGUF file loads with torch: or mlx:, not {kind}:")
    header = read_header(source)  # before hashing: a truncated or foreign file says so at once
    models = cache_root() / MODELS
    fingerprint = _fingerprint(source)
    sha = _remembered_sha256(models, fingerprint) if models.is_dir() else None
    if sha is None:
        sha = sha256_of(source)
    # Keyed by content: the same bytes under another name (a copy, an Ollama blob) reuse the
    # folder.  Published by one rename, a folder with its config is complete.
    for done in sorted(models.glob(f"*-{sha[:16]}-{kind}")) if models.is_dir() else []:
        if not done.name.startswith(".") and (done / "config.json").is_file():
            return done
    folder = models / cached_folder_name(source, sha, kind)
    check_architecture(source, header)
    log.info("importing %s for %s into %s (once; later loads reuse it)", source, kind, folder)
    record = {**fingerprint, "sha256": sha, "to": kind, "architecture": header.architecture}
    try:
        _import(source, folder, kind, record=record, header=header)
    except TargetTaken:
        # Another process converted the same file meanwhile: its folder is as good as ours.
        if (folder / "config.json").is_file():
            return folder
        raise
    return folder
