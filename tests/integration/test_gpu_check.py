"""scripts/gpu-check.sh --dry-run: every step's Python runs on the CPU at tiny sizes and
reports a result, so a broken GPU check shows here before a GPU ever sees it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STEPS = 9


def _python(
    script: str, timeout: float = 600, args: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -c script [args]`` from the checkout, with its ``src`` first on PYTHONPATH."""
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    return subprocess.run(
        [sys.executable, "-c", script, *(args or [])],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.mark.slow  # nine interpreters, two inductor compiles, two exports, torchrun: ~2-3 min
def test_the_dry_run_reports_every_step_in_order(tmp_path: Path) -> None:
    out = tmp_path / "gpu.md"
    page = ROOT / "docs" / "gpu.md"
    before = page.read_text()
    env = {**os.environ, "GPU_CHECK_OUT": str(out)}
    done = subprocess.run(
        ["bash", "scripts/gpu-check.sh", "--dry-run"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr[-2000:]  # 2: it could not start at all
    assert f"results in {out}" in done.stdout
    text = out.read_text()
    assert "dry run on the CPU at tiny sizes: no measurement" in text
    sections = re.findall(r"^### (\d+)\. .*\n\n- \*\*(ok|skipped|FAILED)\*\* after", text, re.M)
    assert [int(n) for n, _ in sections] == list(range(1, STEPS + 1)), text
    assert "timed out" not in text and "crashed" not in text, text
    status = dict(sections)
    # the code GPU users run, run on the CPU: nothing the dry run only pretends to do
    assert status["1"] == "skipped" and "no CUDA test ran" in text  # all skipped is no pass
    if not os.environ.get("GPU_CHECK_NO_COMPILE"):
        assert "backend='inductor'" in text  # step 2: a real inductor compile
        assert "the compiled bucket kernel ran (1,050,625 elements >= 2**20" in text  # step 6
    assert re.search(r"^- table: [1-9]\d* rows under \|", text, re.M)  # step 3's table
    assert "set aside: ('oneDNN matmuls in bf16'" in text  # step 9's assertion held
    # a dry run makes no timing claims
    assert not re.search(r"\d ms\b", text), text
    assert page.read_text() == before  # a dry run leaves the page alone


# Steps 1 and 8 start pytest and torchrun in processes of their own, which see every package.
_IN_PROCESS = ("compile", "bench", "gemm", "scaler", "stochastic", "export", "tf32")


@pytest.mark.slow  # an interpreter that imports torch
def test_a_step_whose_package_is_missing_reports_skipped(tmp_path: Path) -> None:
    """A machine without rich or safetensors (halfprec's own dependencies, which a GPU box's
    python3 may lack): each step says which package it needs and is "skipped", and the
    script goes on; none crashes at import."""
    out = tmp_path / "gpu.md"
    script = (
        "import sys\n"
        "sys.modules['rich'] = sys.modules['safetensors'] = None  # as if not installed\n"
        "sys.path.insert(0, 'scripts/gpu_steps')\n"
        "from pathlib import Path\n"
        "from run import STEPS, Context, run_step\n"
        f"ctx = Context(dry_run=True, out=Path({str(out)!r}))\n"
        f"codes = [run_step(ctx, *STEPS[name]) for name in {_IN_PROCESS!r}]\n"
        "sys.exit(max(codes))\n"
    )
    done = _python(script)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    text = out.read_text()
    sections = re.findall(r"^### (\d+)\. .*\n\n- \*\*(\w+)\*\* after .*\n- (.*)$", text, re.M)
    assert len(sections) == len(_IN_PROCESS), text
    for _, status, why in sections:
        assert status == "skipped", text
        assert re.fullmatch(r"needs the package (rich|safetensors), which this machine .*", why)


def _script_settings() -> tuple[dict[str, int], dict[str, int]]:
    """gpu-check.sh's constants (NAME=number) and its steps' limits, as bash reads them."""
    text = (ROOT / "scripts" / "gpu-check.sh").read_text()
    constants = {k: int(v) for k, v in re.findall(r"^([A-Z_]+_S)=(\d+)$", text, re.M)}
    (steps,) = re.findall(r'^STEPS="([^"]*)"$', text, re.M)
    limits = {name: int(s) for name, s in (e.split(":") for e in steps.split())}
    return constants, limits


def test_the_gpu_check_fits_300_s_by_construction_with_every_inner_limit_inside_its_step() -> None:
    """The script's step limits, plus the time a killed step may take to die and the checks
    before the first step, add up to at most 300 s; every step of run.py has a limit; each
    step gets its limit (--limit), so that the tools it starts stop first (inner timeouts
    derived from it, no fixed number of seconds in any step) and it reports what they
    printed; stderr is not read through a process substitution."""
    import sys

    constants, limits = _script_settings()
    assert constants["BUDGET_S"] == 300
    total = sum(limits.values()) + len(limits) * constants["KILL_AFTER_S"] + constants["CHECKS_S"]
    assert total <= constants["BUDGET_S"], (total, limits)
    sys.path.insert(0, str(ROOT / "scripts" / "gpu_steps"))
    try:
        from run import STEPS  # noqa: PLC0415 - the steps' own table
    finally:
        sys.path.remove(str(ROOT / "scripts" / "gpu_steps"))
    assert list(limits) == list(STEPS)
    text = (ROOT / "scripts" / "gpu-check.sh").read_text()
    call = re.search(r'timeout --kill-after="\$KILL_AFTER_S" "\$seconds" .*?\n.*', text)
    assert call is not None and '--limit "$seconds"' in call.group(0)
    assert ">(" not in text  # no asynchronous process substitution
    for source in (ROOT / "scripts" / "gpu_steps").glob("*.py"):
        for timeout in re.findall(r"timeout=([\w.]+(?:\(\))?)", source.read_text()):
            assert timeout in ("ctx.inner_timeout()", "timeout"), (source.name, timeout)


def test_a_tool_a_step_starts_stops_before_the_step_limit_and_the_step_says_how_far() -> None:
    """Context.inner_timeout is what is left before the deadline (limit less the margin
    to report), never more; a step that reaches its deadline is FAILED with the line it was
    on, its section written, before the outer timeout would kill it."""
    import sys
    import time

    sys.path.insert(0, str(ROOT / "scripts" / "gpu_steps"))
    try:
        from common import Context, run_step  # noqa: PLC0415
    finally:
        sys.path.remove(str(ROOT / "scripts" / "gpu_steps"))
    out = Path(os.devnull)
    ctx = Context(dry_run=True, out=out, deadline=time.monotonic() + 30)
    assert 27 < ctx.inner_timeout() < 30
    assert Context(dry_run=True, out=out, deadline=time.monotonic() - 5).inner_timeout() == 1.0

    def stuck(ctx: Context) -> list[str]:
        while True:
            time.sleep(0.01)

    started = time.monotonic()
    soon = Context(dry_run=True, out=out, deadline=time.monotonic() + 0.3)
    assert run_step(soon, 1, "stuck", stuck) == 1
    assert time.monotonic() - started < 5

    def quick(ctx: Context) -> list[str]:
        return ["done"]

    # a step that ends before its deadline leaves nothing to be raised later
    assert (
        run_step(Context(dry_run=True, out=out, deadline=time.monotonic() + 0.2), 2, "quick", quick)
        == 0
    )
    time.sleep(0.4)


def _common():  # type: ignore[no-untyped-def]
    """scripts/gpu_steps/common.py, imported as the steps import it."""
    sys.path.insert(0, str(ROOT / "scripts" / "gpu_steps"))
    try:
        import common  # noqa: PLC0415
    finally:
        sys.path.remove(str(ROOT / "scripts" / "gpu_steps"))
    return common


def _until(seconds: float) -> float:
    return time.monotonic() + seconds


def test_a_deadline_is_not_swallowed_by_an_except_exception_inside_the_step(
    tmp_path: Path,
) -> None:
    """The deadline may land inside any ``except Exception`` of the step or of what it
    calls (halfprec's bench reports a failed variant and goes on; step 9 reports a failed
    benchmark and goes on): the step still ends there, FAILED at its deadline, and nothing
    it calls sees the deadline as its own failure."""
    common = _common()
    caught: list[str] = []

    def careful(ctx: object) -> list[str]:
        end = _until(30)  # bounded: on a deadline that is swallowed the step ends "ok" here
        while time.monotonic() < end:
            try:
                time.sleep(0.01)
            except Exception as exc:  # what a library does around one piece of work
                caught.append(type(exc).__name__)
        return ["ran to its end"]

    out = tmp_path / "gpu.md"
    code = common.run_step(common.Context(True, out, _until(0.3)), 1, "careful", careful)
    assert (code, caught) == (1, []), out.read_text()  # FAILED: it never reached its end
    assert "- StepTimeout: reached its deadline" in out.read_text()


def test_a_deadline_fires_whatever_argtypes_another_module_gave_ctypes_pythonapi(
    tmp_path: Path,
) -> None:
    """ctypes.pythonapi's function objects are shared by every module of the process; one
    that declares PyThreadState_SetAsyncExc's thread id a signed long (as recipes on the
    web do) must not stop the deadline (a c_ulong argument is then "wrong type")."""
    import ctypes

    common = _common()
    shared = ctypes.pythonapi.PyThreadState_SetAsyncExc
    saved = shared.argtypes
    shared.argtypes = (ctypes.c_long, ctypes.py_object)

    def stuck(ctx: object) -> list[str]:
        end = _until(30)  # bounded: on a deadline that never fires the step ends "ok" here
        while time.monotonic() < end:
            time.sleep(0.01)
        return ["ran to its end"]

    out = tmp_path / "gpu.md"
    try:
        code = common.run_step(common.Context(True, out, _until(0.3)), 1, "stuck", stuck)
    finally:
        shared.argtypes = saved
    assert code == 1, out.read_text()
    assert "- StepTimeout: reached its deadline" in out.read_text()


@pytest.mark.slow  # an interpreter that imports torch
def test_a_call_under_sys_setprofile_after_a_step_reached_its_deadline_returns() -> None:
    """In one process, as in a pytest worker: a step stopped at its deadline, then a
    profiled call (tests/convert/test_swap.py records calls with sys.setprofile). A
    deadline request withdrawn with NULL leaves CPython 3.11's eval breaker set for good,
    and the profiled call then spins at its first line for ever."""
    script = (
        "import sys, time\n"
        "sys.path.insert(0, 'scripts/gpu_steps')\n"
        "from pathlib import Path\n"
        "from common import Context, run_step\n"
        "def stuck(ctx):\n"
        "    while True:\n"
        "        time.sleep(0.01)\n"
        "def quick(ctx):\n"
        "    return ['done']\n"
        "out = Path('/dev/null')\n"
        "codes = [run_step(Context(True, out, time.monotonic() + 0.2), 1, 'stuck', stuck),\n"
        "         run_step(Context(True, out, time.monotonic() + 0.2), 2, 'quick', quick)]\n"
        "events = []\n"
        "def profile(frame, event, arg):\n"
        "    events.append(event)\n"
        "def work():\n"
        "    return sorted(range(10))\n"
        "sys.setprofile(profile)\n"
        "work()\n"
        "sys.setprofile(None)\n"
        "print('returned', codes, events.count('call'))\n"
    )
    try:
        done = _python(script, timeout=120)  # seconds, for a script that needs 1-5
    except subprocess.TimeoutExpired as hung:
        printed = hung.stdout.decode() if isinstance(hung.stdout, bytes) else hung.stdout
        pytest.fail(f"the profiled call after the deadline never returned; printed: {printed}")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "returned [1, 0] 1", done.stdout


@pytest.mark.slow  # an interpreter that imports torch
def test_a_step_that_does_not_stop_at_its_deadline_is_reported_and_its_process_ends() -> None:
    """Stopped between two lines of library code that is not written for it (torch.compile's
    wrapper between setting its frame hook and its ``try``), a step can spin on; in the
    step's own process (run.py: hard_stop) its section is written for it GRACE_S after the
    deadline, naming the line it is on, and the process ends 1, before the outer timeout."""
    script = (
        "import sys, time\n"
        "sys.path.insert(0, 'scripts/gpu_steps')\n"
        "from pathlib import Path\n"
        "from common import Context, run_step\n"
        "def deaf(ctx):\n"
        "    while True:\n"
        "        try:\n"
        "            time.sleep(0.01)\n"
        "        except BaseException:  # swallows the deadline, as a spinning library may\n"
        "            pass\n"
        "ctx = Context(True, Path(sys.argv[1]), time.monotonic() + 0.2, hard_stop=True)\n"
        "run_step(ctx, 3, 'deaf', deaf)\n"
        "print('returned')\n"
    )
    out = Path(os.devnull)
    try:
        done = _python(script, timeout=120, args=[str(out)])  # seconds, for 1-5 of work
    except subprocess.TimeoutExpired:
        pytest.fail("a step that swallowed its deadline ran on past it")
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr[-2000:])
    assert "returned" not in done.stdout
    assert re.search(
        r"^### 3\. deaf\n\n- \*\*FAILED\*\* after \d+\.\d s\n- StepTimeout: reached its "
        r"deadline, .*, and did not stop within 2 s \(<string>:8\)$",
        done.stdout,
        re.M,
    ), done.stdout


def test_step_1_fails_on_a_gpu_when_no_cuda_test_ran_and_says_skipped_in_a_dry_run() -> None:
    """pytest's summary "9 skipped" (exit 0) checked nothing: a failure on a GPU, skipped
    (not ok) in a dry run; "none collected" (exit 5) likewise; ok needs a test that passed."""
    import sys

    sys.path.insert(0, str(ROOT / "scripts" / "gpu_steps"))
    try:
        from common import Skip  # noqa: PLC0415
        from tool_steps import pytest_verdict  # noqa: PLC0415
    finally:
        sys.path.remove(str(ROOT / "scripts" / "gpu_steps"))
    all_skipped = ["SKIPPED [9] tests/integration/test_cuda.py: needs CUDA", "9 skipped in 0.5s"]
    with pytest.raises(RuntimeError, match=r"^no CUDA test ran \(9 skipped in 0.5s; SKIPPED"):
        pytest_verdict(0, all_skipped, "", dry_run=False)
    with pytest.raises(Skip, match="no CUDA test ran"):
        pytest_verdict(0, all_skipped, "", dry_run=True)
    with pytest.raises(RuntimeError, match="no CUDA test ran"):
        pytest_verdict(5, ["no tests ran in 0.1s"], "", dry_run=False)
    ran = ["SKIPPED [1] tests/integration/test_cuda.py:62: needs 2 GPUs", "8 passed, 1 skipped"]
    assert pytest_verdict(0, ran, "", dry_run=False)[0] == "8 passed, 1 skipped"
    with pytest.raises(RuntimeError, match="1 failed"):
        pytest_verdict(1, ["FAILED tests/x.py::t - boom", "1 failed, 8 passed"], "", False)


def test_step_1_reads_the_summary_line_pytest_prints_under_v() -> None:
    import sys

    sys.path.insert(0, str(ROOT / "scripts" / "gpu_steps"))
    try:
        from tool_steps import pytest_verdict  # noqa: PLC0415
    finally:
        sys.path.remove(str(ROOT / "scripts" / "gpu_steps"))
    banner = "=================== 7 passed, 1 skipped in 20.01s ===================="
    assert pytest_verdict(0, [banner], "", dry_run=False) == ["7 passed, 1 skipped in 20.01s"]


@pytest.mark.slow  # an interpreter that imports torch: the check is whether it survives
def test_a_deadline_sends_no_signal_so_a_process_that_blocks_sigalrm_survives_it() -> None:
    """A process whose threads block SIGALRM (to take signals with sigwait, say) still has
    its stuck step ended at the deadline, FAILED with its line, and no signal is left
    pending to end the process once it is unblocked (a pytest worker: "node down"); the
    step's own thread stays this one. Blocked before torch starts any thread, so that
    every thread inherits it."""
    script = (
        "import signal, sys, threading, time\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})\n"
        "sys.path.insert(0, 'scripts/gpu_steps')\n"
        "from pathlib import Path\n"
        "from common import Context, run_step\n"
        "main = threading.get_ident()\n"
        "seen = []\n"
        "def stuck(ctx):\n"
        "    seen.append(threading.get_ident() == main)\n"
        "    while True:\n"
        "        time.sleep(0.01)\n"
        "ctx = Context(dry_run=True, out=Path('/dev/null'), deadline=time.monotonic() + 0.2)\n"
        "code = run_step(ctx, 1, 'stuck', stuck)\n"
        "pending = sorted(signal.sigpending())\n"
        "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})\n"
        "time.sleep(0.3)\n"
        "default = signal.getsignal(signal.SIGALRM) is signal.SIG_DFL\n"
        "print('survived', code, pending, seen, default)\n"
    )
    done = _python(script)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])  # -14: SIGALRM
    assert done.stdout.strip().splitlines()[-1] == "survived 1 [] [True] True", done.stdout
    assert "**FAILED**" in done.stdout and "reached its deadline" in done.stdout, done.stdout
