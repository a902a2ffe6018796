"""Task synthesis: bugs injected into real repositories, validated, and chosen by difficulty.

``frontier`` decides which task families to synthesise next (the learnability frontier, with a
uniform baseline); ``store`` keeps the tasks as JSON lines that ``datasets`` loads. Both use
only the standard library, so importing this package stays cheap.
"""

from __future__ import annotations

from .frontier import (
    HINTS,
    MAX_DISTANCE,
    Family,
    FrontierConfig,
    FrontierSampler,
    Sampler,
    UniformSampler,
    load_sampler,
)
from .store import StoreError, Task, TaskStore, make_instance_id, patch_hash, read_tasks, repo_name

__all__ = [
    "HINTS", "MAX_DISTANCE", "Family", "FrontierConfig", "FrontierSampler", "Sampler",
    "UniformSampler", "load_sampler", "StoreError", "Task", "TaskStore", "make_instance_id",
    "patch_hash", "read_tasks", "repo_name",
]
