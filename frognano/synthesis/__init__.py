"""Task synthesis: bugs injected into real repositories, validated, and chosen by difficulty.

``frontier`` decides which task families to synthesise next (the learnability frontier, with a
uniform baseline); ``store`` keeps the tasks as JSON lines that ``datasets`` loads. Both use
only the standard library, so importing this package stays cheap.
"""

from __future__ import annotations

from . import frontier
from .frontier import *  # noqa: F403 - the sampler API, as frontier.__all__ names it
from .store import StoreError, Task, TaskStore, make_instance_id, patch_hash, read_tasks, repo_name

__all__ = [*frontier.__all__, "StoreError", "Task", "TaskStore", "make_instance_id", "patch_hash", "read_tasks",
           "repo_name"]
