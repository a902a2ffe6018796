"""SIGTERM and SIGINT during a model episode: ``frognano fix`` stops within seconds and the
episode's record is left on disk, saying the episode was cancelled."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import sigint_default

from frognano.repair.harness import ToolCall, render_tool_call

from ..conftest import write_project


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_mid_episode_leaves_the_record(tmp_path, signum):
    project = write_project(tmp_path / "proj", {
        "m.py": """
            import time
            SLOW = False
            # At import, not in the test: a test that hangs is cut after a few seconds
            # (bounds learned from the passing run), an import waits for the whole timeout.
            if SLOW:
                time.sleep(60)


            def f():
                return 1
        """,
        "tests/test_m.py": """
            from m import f


            def test_f():
                assert f() == 2
        """,
    })
    # The episode turns SLOW on, then runs the tests: the signal comes while they sleep.
    replies = [render_tool_call(ToolCall("edit", {"path": "m.py", "old": "SLOW = False", "new": "SLOW = True"})),
               render_tool_call(ToolCall("run_tests", {}))]
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(replies))
    cache = tmp_path / "cache"
    env = {**os.environ, "FROGNANO_CACHE_DIR": str(cache), "FROGNANO_MAX_CANDIDATES": "0",
           "FROGNANO_MAX_PAIRS": "0", "FROGNANO_EPISODES": "1", "FROGNANO_TIMEOUT": "120"}
    proc = subprocess.Popen([sys.executable, "-m", "frognano", "fix", str(project), "--model", f"replay:{script}"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_default)
    try:
        deadline = time.monotonic() + 120
        records: list = []
        while time.monotonic() < deadline and not records:
            records = list(cache.glob("projects/*/episodes/*.json"))
            time.sleep(0.2)
        assert records, "no record after the first turn"
        assert json.loads(records[0].read_text())["status"] == "running"
        time.sleep(2)  # the second turn's tests are asleep now
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    record = json.loads(records[0].read_text())
    assert record["status"] == "cancelled", (record["status"], err[-2000:])
    assert proc.returncode != 0
    assert (project / "m.py").read_text().count("SLOW = False") == 1  # the user's file untouched
