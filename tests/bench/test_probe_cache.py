"""The per-machine probe cache: a hit skips the probe, another machine's key misses, and a
file that is not exactly what halfprec writes is ignored with a note and rewritten."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from halfprec import BenchConfig, benchmark
from halfprec.bench.limit import Gemm, Slowdown, clear_probe_cache
from halfprec.bench.machine import machine_key
from halfprec.bench.probe_cache import ProbeCache, cache_dir
from halfprec.bench.results import BenchResult
from testbed.clocks import ScriptedClock

SLOW = BenchConfig(warmup=1, runs=3, memory="none", skip_slower_than=1e-6, limit=False)
GEMM = Gemm(1, 64, 256, 256)


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HALFPREC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HALFPREC_PROBE_CACHE", "1")
    clear_probe_cache()  # the process cache would hide the disk cache
    return tmp_path / "cache"


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


def _run(bench: BenchConfig = SLOW) -> BenchResult:
    clear_probe_cache()
    return benchmark(Tiny(), torch.ones(4, 16), variants=["halfprec-bf16"], bench=bench)


def test_a_second_run_on_the_machine_uses_the_cached_verdict(folder: Path) -> None:
    first = _run()
    note = first.get("halfprec-bf16").note
    assert note.startswith("bf16 matmuls run") and "cached" not in note
    files = list(folder.glob("probe-*.json"))
    assert len(files) == 1
    data = json.loads(files[0].read_text())
    assert data["key"] == machine_key("cpu")
    assert [p["dtype"] for p in data["probes"]] == ["bf16"] and data["probes"][0]["slow"]
    again = _run()
    skipped = again.get("halfprec-bf16")
    assert skipped.status == "skipped" and ", cached 20" in skipped.note
    assert not any("probe cache" in w for w in again.warnings)


def test_another_machine_key_misses(folder: Path) -> None:
    probe = Slowdown(torch.bfloat16, 80.0, 50.0, 90.0, 3, True)
    here = ProbeCache(folder, machine_key("cpu"))
    here.put(probe, GEMM, 3.0)
    hit = ProbeCache(folder, machine_key("cpu")).get(torch.bfloat16, GEMM, 3.0)
    assert hit is not None and hit[0] == probe
    other = ProbeCache(folder, {**machine_key("cpu"), "torch": "0.0.1"})
    assert other.path != here.path and other.get(torch.bfloat16, GEMM, 3.0) is None
    assert other.notes == []  # a miss is not a problem
    # nor does another product or threshold hit
    assert ProbeCache(folder, machine_key("cpu")).get(torch.bfloat16, GEMM, 2.0) is None
    assert ProbeCache(folder, machine_key("cpu")).get(torch.float16, GEMM, 3.0) is None
    # another machine's file renamed to this machine's name is not trusted
    other.put(probe, GEMM, 3.0)
    here.path.write_text(other.path.read_text())
    renamed = ProbeCache(folder, machine_key("cpu"))
    assert renamed.get(torch.bfloat16, GEMM, 3.0) is None
    assert "its machine key is not this machine's" in renamed.notes[0]


def _valid() -> dict[str, Any]:
    return {
        "dtype": "bf16",
        "gemm": [1, 64, 256, 256],
        "give_up_at": 3.0,
        "ratio": 80.0,
        "low": 50.0,
        "high": 90.0,
        "rounds": 3,
        "slow": True,
        "measured_at": "2026-12-01T11:00:00+00:00",
    }


BAD_ENTRIES = {
    "an extra field": {**_valid(), "run": "os.system('x')"},
    "a missing field": {k: v for k, v in _valid().items() if k != "slow"},
    "a string for a number": {**_valid(), "rounds": "3"},
    "a bool for a number": {**_valid(), "ratio": True},
    "a verdict against its numbers": {**_valid(), "slow": False},
    "low above the ratio": {**_valid(), "low": 85.0},
    "an unknown dtype": {**_valid(), "dtype": "fp8"},
    "a short gemm": {**_valid(), "gemm": [64, 256, 256]},
    "a zero dimension": {**_valid(), "gemm": [1, 0, 256, 256]},
}


def _file(folder: Path, probes: list[Any], **top: Any) -> Path:
    cache = ProbeCache(folder, machine_key("cpu"))
    folder.mkdir(parents=True, exist_ok=True)
    data = {"schema": 1, "key": machine_key("cpu"), "probes": probes, **top}
    cache.path.write_text(json.dumps(data))
    return cache.path


def test_a_valid_file_written_by_hand_is_read(folder: Path) -> None:
    _file(folder, [_valid()])
    hit = ProbeCache(folder, machine_key("cpu")).get(torch.bfloat16, GEMM, 3.0)
    assert hit is not None and hit[0].ratio == 80.0 and hit[0].slow
    assert hit[1] == "2026-12-01T11:00:00+00:00"


@pytest.mark.parametrize("what", sorted(BAD_ENTRIES))
def test_a_malformed_entry_is_ignored_with_a_note(folder: Path, what: str) -> None:
    _file(folder, [BAD_ENTRIES[what]])
    cache = ProbeCache(folder, machine_key("cpu"))
    assert cache.get(torch.bfloat16, GEMM, 3.0) is None
    assert len(cache.notes) == 1 and cache.notes[0].startswith(
        f"ignored the probe cache {cache.path} ("
    )


@pytest.mark.parametrize(
    "text",
    [
        "not json {",
        '{"schema": 1}',
        "[]",
        json.dumps({"schema": 2, "key": {}, "probes": []}),
        '{"schema": 1, "key": {}, "probes": [{"ratio": NaN}]}',
    ],
)
def test_a_corrupt_file_is_ignored_probed_again_and_rewritten(folder: Path, text: str) -> None:
    path = ProbeCache(folder, machine_key("cpu")).path
    folder.mkdir(parents=True)
    path.write_text(text)
    result = _run()
    skipped = result.get("halfprec-bf16")
    assert skipped.status == "skipped" and "cached" not in skipped.note  # probed again
    notes = [w for w in result.warnings if "probe cache" in w]
    assert len(notes) == 1 and notes[0].startswith(f"ignored the probe cache {path} (")
    assert notes[0].endswith("; probed again and rewrote it")
    rewritten = json.loads(path.read_text())
    assert rewritten["key"] == machine_key("cpu") and len(rewritten["probes"]) == 1
    assert all(math.isfinite(rewritten["probes"][0][k]) for k in ("ratio", "low", "high"))


def test_an_oversized_file_is_not_read(folder: Path) -> None:
    path = _file(folder, [_valid()])
    path.write_text(json.dumps({"schema": 1, "pad": "x" * (1 << 20)}))
    cache = ProbeCache(folder, machine_key("cpu"))
    assert cache.get(torch.bfloat16, GEMM, 3.0) is None
    assert "over 1048576 bytes" in cache.notes[0]


def test_the_cache_can_be_turned_off_and_moved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HALFPREC_CACHE_DIR", str(tmp_path / "mine"))
    monkeypatch.setenv("HALFPREC_PROBE_CACHE", "1")
    assert cache_dir() == tmp_path / "mine"
    _run(BenchConfig(**{**SLOW.__dict__, "probe_cache": False}))
    assert not (tmp_path / "mine").exists()
    monkeypatch.setenv("HALFPREC_PROBE_CACHE", "off")
    assert cache_dir() is None
    _run()
    assert not (tmp_path / "mine").exists()
    monkeypatch.delenv("HALFPREC_CACHE_DIR")
    monkeypatch.setenv("HALFPREC_PROBE_CACHE", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "halfprec"


def test_an_injected_probe_timer_is_never_cached(folder: Path) -> None:
    clock = ScriptedClock([0.001], [1.0])
    benchmark(Tiny(), torch.ones(4, 16), variants=["halfprec-bf16"], bench=SLOW, probe_timer=clock)
    assert not folder.exists()


def test_an_unwritable_cache_is_a_note_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("HALFPREC_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setenv("HALFPREC_PROBE_CACHE", "1")
    result = _run()
    assert result.get("halfprec-bf16").status == "skipped"
    assert any(w.startswith("could not write the probe cache") for w in result.warnings)


def test_a_verdict_in_doubt_is_probed_again_never_cached(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # round fifteen: a "not slow" in doubt, read under load on a CPU that emulates bf16, was
    # cached, and every later deploy there built, compiled and timed emulated bf16
    from halfprec.bench import half_speed, limit

    def probe_with(fp32: list[float], half: list[float]) -> half_speed.HalfSpeed:
        clock = ScriptedClock(fp32, half)

        def scripted(*args: Any, timer: Any = None, **kwargs: Any) -> Slowdown:
            return limit.measure_slowdown(*args, timer=clock, **kwargs)

        monkeypatch.setattr(half_speed, "measure_slowdown", scripted)  # the cache stays on
        speed = half_speed.HalfSpeed(
            torch.device("cpu"), [torch.bfloat16], BenchConfig(skip_slower_than=3.0)
        )
        speed.probe({GEMM: 1})
        return speed

    probe_with([0.010, 0.084], [0.078])  # busy in every other fp32 call: in doubt
    assert not list(folder.glob("probe-*.json"))
    sure = probe_with([0.010], [0.080])  # 8x slower in every call
    assert sure.skips and "cached" not in sure.skips[torch.bfloat16]
    (entry,) = json.loads(next(folder.glob("probe-*.json")).read_text())["probes"]
    assert entry["slow"] and entry["dtype"] == "bf16"
    again = probe_with([0.010, 0.084], [0.078])  # the sure verdict stands
    assert "cached" in again.skips[torch.bfloat16]
