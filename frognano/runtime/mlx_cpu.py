"""A fast BLAS for mlx's Linux CPU build.

The ``mlx[cpu]`` wheel for Linux links the reference (netlib) BLAS it bundles, and mlx's float32
matrix products go through it: a 777x576 by 576x49152 product (SmolLM2's output layer over a
prompt) takes 14.4 s there and 0.34 s through OpenBLAS on the same 2 cores, so processing a
777-token prompt took SmolLM2-135M about 100 s.  Where the system has OpenBLAS (Debian:
``apt install libopenblas0-pthread``), loading it into the process's global symbol scope before
mlx is first imported makes mlx's BLAS calls bind to it: the dynamic linker looks a library's
symbols up in the global scope before the library's own dependencies.

Nothing changes on macOS (mlx uses Accelerate and Metal there), when mlx is already imported,
when no OpenBLAS is found, or with ``FROGNANO_MLX_BLAS=bundled``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys

log = logging.getLogger(__name__)

_loaded: str | None = None


def use_fast_blas() -> str | None:
    """Load OpenBLAS globally if that can still speed mlx up here; returns the library loaded
    (now or by an earlier call), None when nothing was done.  Call it before importing mlx."""
    global _loaded
    if _loaded is not None:
        return _loaded
    if (not sys.platform.startswith("linux") or os.environ.get("FROGNANO_MLX_BLAS") == "bundled"
            or "mlx.core" in sys.modules):
        return None
    name = ctypes.util.find_library("openblas")
    if name is None:
        return None
    try:
        ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:  # a broken install: mlx keeps its own BLAS
        log.debug("OpenBLAS %s did not load: %s", name, exc)
        return None
    _loaded = name
    log.debug("mlx's CPU build will use %s", name)
    return name
