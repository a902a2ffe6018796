"""Running a command for a benchmark: its own process group, killed whole at a time limit."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Ran:
    rc: int | None  # None: killed at the time limit
    seconds: float
    stdout: str
    stderr: str


def run(cmd: list[str], cwd: Path, timeout: float, env: dict[str, str] | None = None) -> Ran:
    """``cmd`` in its own process group, so a hanging test's children die with it at the limit."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, errors="replace", start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return Ran(proc.returncode, time.monotonic() - start, out, err)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return Ran(None, time.monotonic() - start, out, err)
    except BaseException:  # Ctrl-C: no orphaned test processes
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        raise
