"""CPU burners for stress runs: ``with burning(2): ...`` keeps two processes spinning on
the CPU for the duration of the block and stops them after (SIGKILL, then reaped).

Used by tests/integration/stress_ddp.py to load the machine the way a busy CI runner does; the
normal test suite never starts a burner.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["burning"]

_SPIN = "x = 0\nwhile True:\n    x = (x * 1103515245 + 12345) % 2147483648\n"


@contextmanager
def burning(processes: int = 2) -> Iterator[list[int]]:
    """Run ``processes`` busy loops beside the block (yields their pids); they are killed
    and reaped when the block ends, however it ends."""
    burners = [
        subprocess.Popen([sys.executable, "-c", _SPIN], stdin=subprocess.DEVNULL)
        for _ in range(processes)
    ]
    try:
        yield [p.pid for p in burners]
    finally:
        for p in burners:
            p.kill()
        for p in burners:
            p.wait()
