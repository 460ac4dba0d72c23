"""Cache files are never read or written through a link, and only in a folder that no one
else can change: a planted ``probe-*.json`` or ``race-*.json`` link cannot overwrite a
user's file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from halfprec.bench.limit import Gemm, Slowdown
from halfprec.bench.machine import machine_key
from halfprec.bench.probe_cache import ProbeCache
from halfprec.bench.race_cache import RaceCache
from halfprec.cachefile import UnsafeCacheFolderError, check_folder, read_cache, write_cache
from support.interrupts import interrupt_once_made

PROBE = Slowdown(torch.bfloat16, 80.0, 50.0, 90.0, 3, True)
GEMM = Gemm(1, 64, 256, 256)


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o700)
    return folder


def test_a_probe_cache_linked_to_a_user_file_leaves_the_file_alone(
    cache: Path, tmp_path: Path
) -> None:
    canary = tmp_path / "precious.txt"
    canary.write_text("the user's file")
    probes = ProbeCache(cache, machine_key("cpu"))
    probes.path.symlink_to(canary)
    assert probes.get(torch.bfloat16, GEMM, 3.0) is None  # the link is not read through
    probes.put(PROBE, GEMM, 3.0)
    assert canary.read_text() == "the user's file"
    assert not probes.path.is_symlink() and probes.path.is_file()  # the link was replaced
    hit = ProbeCache(cache, machine_key("cpu")).get(torch.bfloat16, GEMM, 3.0)
    assert hit is not None and hit[0] == PROBE


def test_a_race_cache_linked_to_a_user_file_leaves_the_file_alone(
    cache: Path, tmp_path: Path
) -> None:
    canary = tmp_path / "precious.txt"
    canary.write_text("the user's file")
    race = RaceCache({"variants": ["a", "b"]}, cache)
    assert race.path is not None
    race.path.symlink_to(canary)
    assert race.get() is None
    assert race.put("a") is None
    assert canary.read_text() == "the user's file" and not race.path.is_symlink()
    assert RaceCache({"variants": ["a", "b"]}, cache).get() is not None


def test_a_link_to_a_valid_cache_file_elsewhere_is_not_read(cache: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "other"
    elsewhere.mkdir(mode=0o700)
    planted = ProbeCache(elsewhere, machine_key("cpu"))
    planted.put(PROBE, GEMM, 3.0)
    probes = ProbeCache(cache, machine_key("cpu"))
    probes.path.symlink_to(planted.path)
    assert probes.get(torch.bfloat16, GEMM, 3.0) is None
    assert any("ignored the probe cache" in n for n in probes.notes)


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757])
def test_a_folder_others_can_write_is_refused(cache: Path, tmp_path: Path, mode: int) -> None:
    cache.chmod(mode)
    canary = tmp_path / "precious.txt"
    canary.write_text("the user's file")
    with pytest.raises(UnsafeCacheFolderError, match="can be written by others"):
        write_cache(cache / "probe-x.json", "{}")
    probes = ProbeCache(cache, machine_key("cpu"))
    probes.put(PROBE, GEMM, 3.0)  # a note, nothing written
    assert any("can be written by others" in n for n in probes.notes)
    assert list(cache.iterdir()) == []
    assert RaceCache({"variants": ["a"]}, cache).put("a") is not None


def test_a_sticky_folder_of_your_own_is_accepted(cache: Path) -> None:
    cache.chmod(0o1777)
    check_folder(cache)
    write_cache(cache / "probe-x.json", "{}")
    assert read_cache(cache / "probe-x.json", limit=10) == b"{}"


def test_a_missing_folder_is_made_private(tmp_path: Path) -> None:
    write_cache(tmp_path / "new" / "deeper" / "probe-x.json", "{}")
    assert (tmp_path / "new" / "deeper").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "new" / "deeper" / "probe-x.json").stat().st_mode & 0o777 == 0o600


def test_a_cache_file_that_is_a_fifo_is_not_read(cache: Path) -> None:
    os.mkfifo(cache / "probe-x.json")
    with pytest.raises(OSError, match=r"a FIFO \(named pipe\), not a regular file"):
        read_cache(cache / "probe-x.json", limit=10)


def test_a_cache_write_past_the_file_size_limit_is_a_note_and_leaves_no_temp(
    cache: Path,
) -> None:
    import resource
    import signal

    probes = ProbeCache(cache, machine_key("cpu"))
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, not a kill
    resource.setrlimit(resource.RLIMIT_FSIZE, (16, old_limit[1]))
    try:
        probes.put(PROBE, GEMM, 3.0)
        note = RaceCache({"variants": ["a"]}, cache).put("a")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)
    assert any("could not write the probe cache" in n for n in probes.notes)
    assert note is not None and "could not write" in note
    assert list(cache.iterdir()) == []  # no cache file, no temp file


def test_an_interrupt_the_moment_its_temp_is_made_leaves_no_temp(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    interrupt_once_made(monkeypatch, "open")
    with pytest.raises(KeyboardInterrupt):
        write_cache(cache / "race-x.json", "{}\n")
    monkeypatch.undo()
    assert list(cache.iterdir()) == []
