"""pytest plugin: under CI (CI=true) as root, a skipped test is a failed test.

CI runs as root on a machine where .ci/run installs everything the suite needs (systemd-nspawn,
debootstrap, promtool, py-spy, ...), so a skip there means a check silently did not run: the
nspawn and root-only tests must fail instead. A test that may legitimately skip even there
(nothing the machine can install changes it) is marked `@pytest.mark.ci_may_skip`.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest

_STRICT = os.environ.get("CI", "").lower() == "true" and os.geteuid() == 0


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "ci_may_skip: this test may skip under CI as root (it says why)"
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Generator[None]:
    outcome = yield
    report = outcome.get_result()
    if not (_STRICT and report.skipped) or item.get_closest_marker("ci_may_skip"):
        return
    if hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = f"skipped under CI as root, where every test must run: {reason}"
