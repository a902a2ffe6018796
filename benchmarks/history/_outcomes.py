"""Pytest plugin: write each test's outcome as JSON, for benchmarks/history/mine.py.

Load it with ``-p _outcomes`` and this folder on ``PYTHONPATH``; it writes
``{nodeid: "passed" | "failed" | "skipped" | "error"}`` to the path in the environment variable
``HISTORY_OUTCOMES`` when the session ends (nothing when the variable is unset).

    failed   the test body (call phase) failed, or a strict xfail passed unexpectedly
    error    setup or teardown failed, or a module/class could not be collected (its nodeid is
             the collector's, e.g. ``tests/test_x.py``)
    skipped  skipped, or an expected failure (xfail) that did fail: neither a pass nor a bug
    passed   passed, or a non-strict xfail that passed (xpass)
"""

from __future__ import annotations

import json
import os

_outcomes: dict[str, str] = {}


def pytest_collectreport(report):
    # A module that fails to import yields no test items at all; recording it keeps a broken
    # module from looking like a module with nothing in it.
    if report.failed:
        _outcomes[report.nodeid or "<collection>"] = "error"


def pytest_runtest_logreport(report):
    nodeid = report.nodeid
    if report.when == "call":
        if report.passed:
            _outcomes[nodeid] = "passed"
        elif report.failed:
            _outcomes[nodeid] = "failed"
        else:  # skipped, including xfail that failed as expected
            _outcomes[nodeid] = "skipped"
    elif report.when == "setup":
        if report.failed:
            _outcomes[nodeid] = "error"
        elif report.skipped:
            _outcomes[nodeid] = "skipped"
    elif report.when == "teardown" and report.failed:
        # A failing body stays "failed": the teardown error is the lesser news.
        if _outcomes.get(nodeid) != "failed":
            _outcomes[nodeid] = "error"


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("HISTORY_OUTCOMES")
    if not path:
        return
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(_outcomes, handle, indent=0, sort_keys=True)
