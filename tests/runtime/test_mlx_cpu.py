"""mlx's Linux CPU build through the system's OpenBLAS (runtime/mlx_cpu.py): loaded before mlx,
used by mlx's matmuls, and the same products as numpy's; off with FROGNANO_MLX_BLAS=bundled."""

from __future__ import annotations

import ctypes.util
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("mlx.core")

if not sys.platform.startswith("linux") or ctypes.util.find_library("openblas") is None:
    pytest.skip("needs Linux and an OpenBLAS (apt install libopenblas0-pthread)", allow_module_level=True)

PROBE = """
import json, time
import numpy as np
from frognano.runtime import mlx as backend  # loads OpenBLAS first, then mlx
import mlx.core as mx
from frognano.runtime.mlx_cpu import use_fast_blas
a = np.random.default_rng(0).standard_normal((300, 576)).astype(np.float32)
b = np.random.default_rng(1).standard_normal((576, 4096)).astype(np.float32)
x, y = mx.array(a), mx.array(b)
mx.eval(x, y)
t = time.perf_counter()
product = np.array(x @ y)
seconds = time.perf_counter() - t
# The system's libopenblas (numpy's own is libscipy_openblas64_, with renamed symbols).
names = {line.split("/")[-1] for line in open("/proc/self/maps").read().splitlines() if "/" in line}
mapped = any(name.startswith("libopenblas") for name in names)
print(json.dumps({"loaded": use_fast_blas(), "mapped": mapped, "seconds": seconds,
                  "error": float(np.abs(product - a @ b).max())}))
"""


def _probe(**env: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_mlx_multiplies_through_openblas_and_gets_numpys_products():
    fast = _probe()
    assert fast["loaded"] and fast["mapped"]
    assert fast["error"] < 1e-3
    bundled = _probe(FROGNANO_MLX_BLAS="bundled")
    assert bundled["loaded"] is None and not bundled["mapped"]
    assert bundled["error"] < 1e-3
    # 1.4 GFLOP: about 0.8 s through the bundled reference BLAS, a few ms through OpenBLAS.
    assert fast["seconds"] < bundled["seconds"], (fast, bundled)


def test_nothing_is_loaded_once_mlx_is_imported():
    done = subprocess.run([sys.executable, "-c", "import mlx.core\nfrom frognano.runtime.mlx_cpu import use_fast_blas\n"
                           "print(use_fast_blas())"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "None", done.stderr[-2000:]
