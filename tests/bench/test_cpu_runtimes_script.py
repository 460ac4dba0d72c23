"""``benchmarks/cpu_runtimes.py``: bad options are one line and exit 2, before any model
loads (the run itself is a benchmark, not a test)."""

from __future__ import annotations

import pytest

import cpu_runtimes


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--models", "minilm-b64"], "unknown model minilm-b64; use a comma list of minilm-b1"),
        (["--runs", "1"], "--runs 1 gives no spread; use --runs 2 or more"),
        (["--color"], "unrecognized arguments: --color"),
    ],
)
def test_bad_option_is_one_line_exit_2(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cpu_runtimes.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr()
    assert err.out == "" and err.err.count("\n") == 1
    assert err.err.startswith("cpu_runtimes: error: ") and needle in err.err
