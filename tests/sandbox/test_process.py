"""The controller's watchdog: when a test the in-process alarm could not stop is killed."""

import json
import time

import pytest

from frognano.sandbox.process import Watch


@pytest.mark.parametrize("limit, margin", [(0.5, 0.25), (1.0, 0.5), (2.0, 1.0), (30.0, 1.0)])
def test_the_backstop_margin_is_short_for_a_short_limit(tmp_path, limit, margin):
    results = tmp_path / "results.jsonl"
    results.write_text(json.dumps({"kind": "start", "nodeid": "t"}) + "\n")
    watch = Watch(results, timeout=30.0, timeouts={"t": limit}, collect_timeout=120.0)
    watch.poll()
    assert watch.current == "t"
    # Past the limit, within the margin: the alarm's timeout may still be finishing teardown.
    watch.since = time.monotonic() - (limit + margin - 0.05)
    assert not watch.overdue()
    watch.since = time.monotonic() - (limit + margin + 0.05)
    assert watch.overdue()
