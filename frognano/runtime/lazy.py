"""The repair model, loaded on first use and kept until closed.

Loading a model costs seconds (weights into memory) and most saves never need one: the
operator search fixes the common bugs.  Every face therefore holds a ``LazyModel`` and the
engine loads it only when a model episode starts.  The language server keeps one across fix
jobs and engine rebuilds until the ``model`` setting changes; the command line and watch mode
hold one for their session.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from ..errors import FrogNanoError
from ..progress import Progress, Silent
from .base import ModelError, Sampling
from .load import load_model

log = logging.getLogger(__name__)


def decode_threads(lanes: int, cores: int | None = None) -> int:
    """Threads for torch's CPU kernels while FrogNano also runs ``lanes`` test processes.

    torch starts one thread per core.  On a machine whose cores are also running tests (the
    search's lanes, the tests a model's ``run_tests`` starts, the editor), its threads wait on
    each other at every kernel: SmolLM2 decoded 2-3x slower on 2 threads than on 1 with a test
    process beside it.  So the model gets the cores the lanes leave, and at least one.
    """
    cores = cores or os.cpu_count() or 1
    return max(1, cores - max(0, lanes))


class LazyModel:
    """A ``Model`` whose weights load on the first ``generate`` (thread-safe; a spec that
    fails to load fails once and the same error is raised at every later use).  ``lanes``: the
    test processes that may run beside the model (a torch model's threads follow it)."""

    def __init__(self, spec: str, progress: Progress | None = None, *, lanes: int | None = None) -> None:
        self.spec = spec
        self.lanes = lanes
        self.name = spec
        self.progress: Progress = progress or Silent()
        self.loads = 0
        self._model: Any = None
        self._error: FrogNanoError | None = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def load(self) -> Any:
        with self._lock:
            if self._model is None:
                if self._error is not None:
                    raise self._error
                self.progress.phase(f"loading {self.spec}")
                started = time.monotonic()
                try:
                    self._model = load_model(self.spec, **self._options())
                except FrogNanoError as exc:
                    self._error = exc
                    raise
                except ImportError as exc:
                    self._error = ModelError(f"model {self.spec}: {exc} (install the backend's extra, "
                                             "e.g. pip install 'frognano[mlx]')")
                    raise self._error from exc
                self.loads += 1
                self.name = getattr(self._model, "name", self.spec)
                log.info("loaded %s in %.1f s", self.spec, time.monotonic() - started)
            return self._model

    def _options(self) -> dict[str, Any]:
        if self.lanes is None or not self.spec.startswith("torch:"):
            return {}
        return {"threads": decode_threads(self.lanes)}

    def generate(self, messages, tools=None, sampling: Sampling | None = None, **kwargs):  # noqa: ANN001, ANN201
        return self.load().generate(messages, tools, sampling, **kwargs)

    def close(self) -> None:
        with self._lock:
            if self._model is not None:
                self._model.close()
                self._model = None
