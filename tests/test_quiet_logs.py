from __future__ import annotations

import logging

import pytest

from halfprec.quiet_logs import quiet_logs


def test_records_below_the_level_are_held_back_and_the_level_restored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = logging.getLogger("halfprec.test.quiet")
    log.setLevel(logging.INFO)
    caplog.set_level(logging.DEBUG)  # the root would show everything
    with quiet_logs("halfprec.test.quiet"):
        log.warning("a graph dump")
        log.error("kept")
    log.warning("after")
    assert [r.getMessage() for r in caplog.records] == ["kept", "after"]
    assert log.level == logging.INFO


def test_the_level_is_restored_when_the_block_raises() -> None:
    log = logging.getLogger("halfprec.test.quiet.raise")
    log.setLevel(logging.NOTSET)
    with pytest.raises(RuntimeError), quiet_logs("halfprec.test.quiet.raise"):
        assert log.level == logging.ERROR
        raise RuntimeError("boom")
    assert log.level == logging.NOTSET
