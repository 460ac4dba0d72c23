"""Where a benchmark's time goes, by phase: wall seconds and CPU seconds (:class:`Phases`).

Wall seconds are what a user waits; on a shared machine they grow with other processes'
load. CPU seconds (:func:`cpu_seconds`: this process's threads, and the processes it
started, such as inductor's compile workers and the memory subprocesses) grow far less
with load, so two runs on a busy machine compare by them.
"""

from __future__ import annotations

import contextlib
import os
import resource
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

_PROC = Path("/proc")


def _stat(pid: int) -> tuple[int, list[int]] | None:
    """``(parent pid, [utime, stime, cutime, cstime])`` in clock ticks, or None."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:  # gone, or no /proc
        return None
    rest = text[text.rindex(")") + 2 :].split()
    return int(rest[1]), [int(x) for x in rest[11:15]]


def _live_children_s() -> float:
    """CPU seconds of this process's live descendants (Linux /proc; 0 elsewhere): those
    that have not exited yet are not in ``RUSAGE_CHILDREN``."""
    if not _PROC.is_dir():
        return 0.0
    parents: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for entry in os.scandir(_PROC):
        if not entry.name.isdigit():
            continue
        found = _stat(int(entry.name))
        if found is not None:
            parents.setdefault(found[0], []).append(int(entry.name))
            ticks[int(entry.name)] = sum(found[1])
    total, todo = 0, list(parents.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        total += ticks.get(pid, 0)
        todo += parents.get(pid, [])
    return total / os.sysconf("SC_CLK_TCK")


def cpu_seconds() -> float:
    """CPU seconds used so far by this process (all its threads) and the processes it
    started: those that exited (``RUSAGE_CHILDREN``) and, on Linux, those still running."""
    done = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + done.ru_utime + done.ru_stime + _live_children_s()


@dataclass
class Phases:
    """Seconds by phase: ``wall`` and ``cpu`` (``cpu_seconds``; tests pass a scripted
    clock)."""

    wall: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)
    cpu_clock: Callable[[], float] = cpu_seconds

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Adds the wall and CPU seconds spent inside to phase ``name``."""
        start, cpu = time.perf_counter(), self.cpu_clock()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start, self.cpu_clock() - cpu)

    def add(self, name: str, wall: float, cpu: float) -> None:
        self.wall[name] = self.wall.get(name, 0.0) + wall
        self.cpu[name] = self.cpu.get(name, 0.0) + cpu

    def move(self, source: str, target: str, wall: float, cpu: float) -> None:
        """Count ``wall``/``cpu`` seconds of ``source`` as ``target`` (a compiling first
        call, timed inside the warm-up, is the compile)."""
        self.add(source, -wall, -cpu)
        self.add(target, wall, cpu)


def cpu_text(cpu: dict[str, float]) -> str:
    """``CPU 190.3 s: compile 45.1 s, timing 80.2 s, ...`` (largest phase first; empty
    without a ``total``)."""
    if "total" not in cpu:
        return ""
    parts = sorted(((k, v) for k, v in cpu.items() if k != "total"), key=lambda kv: -kv[1])
    return f"CPU {cpu['total']:.1f} s: " + ", ".join(f"{k} {v:.1f} s" for k, v in parts)
