"""A run whose every selected test was skipped proved nothing: it exits 1, not 0.

A pytest plugin (loaded by tests/conftest.py). ``pytest tests/integration/test_cuda.py``
on a machine without CUDA skips every test; without this, that run reads as a pass (the
GPU check's first step did). ``--allow-all-skipped`` is for a run where skipping is the
expected result (the GPU check's dry run on a CPU).
"""

from __future__ import annotations

import pytest

OUTCOMES_THAT_RAN = ("passed", "failed", "error", "xfailed", "xpassed")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--allow-all-skipped",
        action="store_true",
        help="exit 0 when every selected test was skipped (default: exit 1, nothing was checked)",
    )


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if hasattr(config, "workerinput") or config.getoption("--allow-all-skipped"):
        return  # an xdist worker: the controller sees every outcome
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or exitstatus != pytest.ExitCode.OK:
        return
    ran = sum(len(reporter.stats.get(key, [])) for key in OUTCOMES_THAT_RAN)
    skipped = len(reporter.stats.get("skipped", []))
    if skipped and not ran:
        reporter.write_line(
            f"all {skipped} selected tests were skipped, so nothing was checked: exit 1 "
            "(run them where they can run, or pass --allow-all-skipped where skipping is "
            "the expected result)",
            red=True,
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
