"""``RunnerConfig``: how tests run (interpreter, limits, warm server, OS sandbox).

Its own module so that both halves of the runner (``runner.py`` and the warm server's client,
``forkserver.py``) can name it without importing each other, and so that the settings' side of
it lives in the sandbox: ``from_settings`` reads ``config.Settings`` here, one layer above it,
and ``config`` knows nothing of the sandbox.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..config import check_sandbox
from ..errors import UsageError

if TYPE_CHECKING:
    from ..config import Settings


@dataclass
class RunnerConfig:
    """How tests run.  Every field has a default; ``from_settings`` fills them from settings."""

    python: str | None = None  # the project's interpreter; None: its .venv, else this one
    test_args: list[str] = field(default_factory=list)  # extra pytest arguments
    timeout: float = 30.0  # seconds per test
    collect_timeout: float = 120.0  # seconds for collection (imports, conftest)
    memory_mb: int = 4096  # address space a run may add
    fsize_mb: int = 256  # largest file a test may write
    max_output: int = 4000  # characters of captured output kept per test
    warm: bool = True  # use the fork server when it can be used
    swap: bool = True  # partial runs in the warm session: collected once, edits swapped in
    sandbox: str = "auto"  # confine test processes: auto | required | off (see frognano_confine)
    sandbox_writable: list[str] = field(default_factory=list)  # more paths the tests may write
    test_env: list[str] = field(default_factory=list)  # more environment variables the tests get

    def __post_init__(self) -> None:
        if self.timeout <= 0:
            raise UsageError(f"timeout must be positive, got {self.timeout}")
        if self.memory_mb < 64:
            raise UsageError(f"memory_mb must be at least 64, got {self.memory_mb}")
        problem = check_sandbox(self.sandbox, self.sandbox_writable)
        if problem:
            raise UsageError(problem)

    @classmethod
    def from_settings(cls, settings: Settings) -> RunnerConfig:
        """The runner's part of the project's settings (``[tool.frognano]``, environment, flags)."""
        return cls(
            python=settings.python, test_args=list(settings.test_args), timeout=settings.timeout,
            collect_timeout=settings.collect_timeout, memory_mb=settings.memory_mb,
            fsize_mb=settings.fsize_mb, warm=settings.warm, swap=settings.swap, sandbox=settings.sandbox,
            sandbox_writable=list(settings.sandbox_writable), test_env=list(settings.test_env),
        )
