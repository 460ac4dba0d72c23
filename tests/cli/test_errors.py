"""Every bad input and environment failure: one stderr line, exit 2, nothing written."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import halfprec
from support import FIXTURES, SUPPORT
from support.cli import run_cli, run_cli_subprocess
from support.export_models import example_inputs, tiny
from support.hf_models import save as save_hf
from support.special_files import fifo, within

TESTS = Path(__file__).resolve().parents[1]  # tests/
USER = f"{FIXTURES / 'user_model.py'}:build"
TINY = f"{SUPPORT / 'export_models.py'}:tiny"


def _one_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("halfprec: error: ")
    for needle in needles:
        assert needle in proc.stderr


@pytest.mark.parametrize("command", ["check", "tune"])
def test_out_of_range_min_cosine_is_exit_2(command: str) -> None:
    extra = ["--runs", "0"] if command == "check" else []
    _one_error(run_cli(command, USER, "--min-cosine", "2", *extra), "--min-cosine")


def test_meta_device_is_exit_2() -> None:
    _one_error(run_cli("check", USER, "--device", "meta", "--runs", "0"), "'meta'", "use cpu")


def test_missing_output_folders_are_made_as_every_other_tool_makes_them(tmp_path: Path) -> None:
    out = tmp_path / "new" / "deeper" / "x.safetensors"
    assert run_cli("convert", USER, "-o", str(out)).returncode == 0
    assert out.is_file()
    exported = tmp_path / "other" / "x.pt2"
    assert run_cli("export", TINY, "-o", str(exported), "--runs", "0").returncode == 0
    assert exported.is_file()
    proc = run_cli("convert", USER, "-o", str(tmp_path / "x.safetensors"), "--mkdirs")
    _one_error(proc, "--mkdirs")  # no such option: no tool needs to be asked


def test_output_under_a_regular_file_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("")
    out = tmp_path / "plain" / "x.safetensors"
    _one_error(run_cli("convert", USER, "-o", str(out)), "is not a folder")
    _one_error(run_cli("export", TINY, "-o", str(tmp_path / "plain" / "x.pt2")), "not a folder")


@pytest.mark.parametrize("where", [".", "new/deeper"])
def test_disk_full_is_exit_2_and_leaves_nothing(tiny_fs: Path, where: str) -> None:
    """Nothing: neither a partial file nor the folders made for it."""
    out = tiny_fs / where / "big.safetensors"
    proc = run_cli("convert", "builtin:cnn", "-o", str(out), "--dtype", "fp16")
    _one_error(proc, f"cannot use {out}: the disk is full")
    assert list(tiny_fs.iterdir()) == []


def test_read_only_file_system_is_exit_2(tiny_fs: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(tiny_fs)], check=True)
    _one_error(run_cli("convert", USER, "-o", str(tiny_fs / "x.safetensors")), "read-only")


def test_bad_recipe_metadata_in_a_checkpoint_is_named(tmp_path: Path) -> None:
    good = tmp_path / "good.safetensors"
    assert run_cli("convert", USER, "-o", str(good), "--dtype", "fp16").returncode == 0
    from safetensors import safe_open

    with safe_open(str(good), framework="pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
        meta = dict(f.metadata())
    from fixtures.user_model import build

    forged = tmp_path / "forged.safetensors"
    for bad in ("{not json", '{"a": 1}', '{"format": "halfprec-recipe/1", "dtype": "fp8"}'):
        save_file(tensors, str(forged), metadata={**meta, "recipe": bad})
        with pytest.raises(halfprec.CheckpointError, match="its recipe metadata is unreadable"):
            halfprec.load(forged, into=build)
    legacy = {**meta, "format": "halfprec/1", "keep_fp32": "{not json"}
    del legacy["halfprec_format"]  # a file of the previous version: islands in keep_fp32
    save_file(tensors, str(forged), metadata=legacy)
    with pytest.raises(halfprec.CheckpointError, match="keep_fp32 metadata is not valid JSON"):
        halfprec.load(forged, into=build)
    # --weights reads a half file as its fp32 upcast, after checking its tensors against the
    # recipe its metadata describes them by: an unreadable one is refused there too
    proc = run_cli("check", USER, "--weights", str(forged), "--runs", "0")
    _one_error(proc, "keep_fp32 metadata is not valid JSON")


@pytest.mark.parametrize("arch", [["os"], [42], ["pipeline"], "BertModel; rm"])
def test_odd_architectures_entry_is_exit_2(tmp_path: Path, arch: object) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"architectures": arch}))
    _one_error(run_cli("check", str(tmp_path), "--runs", "0"), "architectures")


def test_bad_config_json_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{")
    _one_error(run_cli("check", str(tmp_path), "--runs", "0"), "not valid JSON")


@pytest.mark.parametrize("name", ["tiny.pt2", "tiny.onnx"])
def test_artifact_of_another_model_is_exit_2(tmp_path: Path, name: str) -> None:
    artifact = tmp_path / name
    halfprec.export(tiny(), example_inputs(), artifact, "fp16", runs=0)
    _one_error(
        run_cli("check", USER, "--artifact", str(artifact), "--runs", "0"),
        "does not fit",
        "exported from",
    )


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("")
    proc = run_cli("--debug", "convert", USER, "-o", str(tmp_path / "plain" / "x.safetensors"))
    assert proc.returncode == 2
    assert "Traceback" in proc.stderr and "halfprec: error:" in proc.stderr


FAILING = FIXTURES / "failing_models.py"


def test_an_unexpected_exception_is_an_internal_error_exit_3() -> None:
    proc = run_cli("check", f"{FAILING}:copy_bug", "--runs", "0")
    assert proc.returncode == 3, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("halfprec: internal error: ZeroDivisionError: division by zero")
    assert f"raised at {FAILING}:" in lines[0] and "in __deepcopy__" in lines[0]
    assert "add --debug" in lines[0]
    debug = run_cli("--debug", "check", f"{FAILING}:copy_bug", "--runs", "0")
    assert debug.returncode == 3 and "Traceback" in debug.stderr


CTRL_C_LINE = "halfprec: interrupted (Ctrl-C); a file being written was left as it was before"


def test_ctrl_c_exits_130_with_one_line() -> None:
    """A real SIGINT, sent to this process by the model's forward, handled as Python's
    default handler does: KeyboardInterrupt where the command is, then exit 130."""
    assert threading.current_thread() is threading.main_thread()  # where signals are handled
    # a runner started in the background (nohup ... &) ignores SIGINT: handle it as a terminal would
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = run_cli("check", f"{FAILING}:interrupted", "--runs", "0")
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped the command")
    finally:
        signal.signal(signal.SIGINT, old)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip().splitlines() == [CTRL_C_LINE]


@pytest.mark.slow  # a real process
def test_ctrl_c_ends_the_process_with_exit_130_and_one_line() -> None:
    proc = run_cli_subprocess("check", f"{FAILING}:interrupted", "--runs", "0")
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip().splitlines() == [CTRL_C_LINE]


@pytest.mark.parametrize("device", ["mps", "xpu", "hpu"])
def test_a_device_kind_this_machine_lacks_is_one_line(device: str) -> None:
    if device == "mps" and torch.backends.mps.is_available():
        pytest.skip("this machine has MPS")
    if device == "xpu" and torch.xpu.is_available():
        pytest.skip("this machine has an XPU")
    _one_error(run_cli("check", USER, "--device", device), f"device {device!r} is not available")


@pytest.mark.parametrize("command", ["check", "bench", "tune"])
def test_a_config_value_refused_by_its_config_is_exit_2(command: str) -> None:
    """Tolerance's own ValueError (not a click range) is the user's input, not a bug."""
    proc = run_cli(command, USER, "--min-sqnr", "nan")
    _one_error(proc, "Tolerance(min_sqnr_db=nan): a NaN threshold", f"halfprec {command} --help")


@pytest.mark.parametrize("doc", ["cli.md", "safety.md", "verdicts.md"])
def test_documented_exit_codes_are_the_cli_codes(doc: str) -> None:
    from halfprec import cli

    text = (TESTS.parent / "docs" / doc).read_text()
    table = text.split("| code | meaning", 1)[1].split("\n\n", 1)[0]
    codes = [int(line.split("|")[1]) for line in table.splitlines()[2:]]
    constants = [cli.EXIT_OK, cli.EXIT_FAILED, cli.EXIT_USAGE]
    ends = [cli.EXIT_INTERNAL, cli.EXIT_INTERRUPTED, cli.EXIT_TERMINATED]
    assert codes == [*constants, *ends] == [0, 1, 2, 3, 130, 143]


@pytest.mark.parametrize(
    ("command", "flag"),
    [("bench", "--max-call-s"), ("bench", "--skip-slower-than"), ("check", "--min-cosine")],
)
def test_a_nan_limit_is_refused_not_turned_off(command: str, flag: str) -> None:
    """``nan <= 0`` is False, so a plain range check lets NaN through and turns it off."""
    _one_error(run_cli(command, USER, flag, "nan"), f"'{flag}': 'nan' is not a number")


def test_readme_names_every_exit_code() -> None:
    text = " ".join((TESTS.parent / "README.md").read_text().split())
    assert "0 within tolerance, 1 out of tolerance (or findings), 2 bad input" in text
    assert "3 internal error" in text and "130 Ctrl-C" in text


@pytest.mark.parametrize("command", ["diagnose", "bench"])
def test_a_plot_under_a_regular_file_is_exit_2_and_creates_nothing(
    tmp_path: Path, command: str
) -> None:
    (tmp_path / "plain").write_text("")
    out = tmp_path / "plain" / "new" / "chart.png"
    _one_error(run_cli(command, USER, "--plot", str(out)), "plain is not a folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain"]


def test_sys_exit_in_the_users_code_is_not_a_silent_success(tmp_path: Path) -> None:
    """``SystemExit(0)`` from a factory, a model file's import or a forward used to end
    halfprec with exit 0 and no output, as if the check had passed."""
    _one_error(run_cli("check", f"{FAILING}:exits", "--runs", "0"), "raised SystemExit: 0")
    script = tmp_path / "script.py"
    script.write_text("import sys\nsys.exit(0)\n")
    _one_error(run_cli("check", f"{script}:build", "--runs", "0"), f"importing {script}")
    proc = run_cli("check", f"{FAILING}:exits_in_forward", "--runs", "0")
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.startswith("halfprec: internal error: SystemExit: 0 (raised at ")


@pytest.mark.parametrize("defect", ["missing", "shape"])
def test_convert_refuses_weights_that_do_not_cover_the_model(tmp_path: Path, defect: str) -> None:
    """Streamed from a safetensors file, a tensor the file lacks (or holds in another
    shape) used to be left out of (or copied wrong into) the half file, with exit 0."""
    from fixtures.user_model import build

    state = {k: v.clone() for k, v in build().state_dict().items()}
    if defect == "missing":
        del state["head.bias"]
    else:
        state["lin.weight"] = torch.zeros(32, 15)
    weights = tmp_path / "weights.safetensors"
    save_file(state, str(weights))
    out = tmp_path / "out" / "half.safetensors"
    out.parent.mkdir()
    proc = run_cli("convert", USER, "--weights", str(weights), "-o", str(out))
    needle = "missing head.bias" if defect == "missing" else "lin.weight has shape (32, 15)"
    _one_error(proc, needle, "same architecture")
    assert list(out.parent.iterdir()) == []


def test_a_recipe_op_island_without_a_line_number_is_exit_2(tmp_path: Path) -> None:
    recipe = tmp_path / "recipe.json"
    island = {"module": "lin", "op": "linear", "location": "model.py:abc"}
    recipe.write_text(
        json.dumps({"format": "halfprec-recipe/1", "dtype": "fp16", "op_islands": [island]})
    )
    _one_error(run_cli("check", USER, "--recipe", str(recipe), "--runs", "0"), "'model.py:abc'")


@pytest.mark.parametrize("flag", ["--recipe", "--inputs"])
def test_a_folder_given_as_a_file_is_named_a_folder(tmp_path: Path, flag: str) -> None:
    _one_error(run_cli("check", USER, flag, str(tmp_path), "--runs", "0"), "is a folder; give")


@pytest.mark.parametrize(("name", "content"), [("empty.pt", b""), ("empty.safetensors", b"")])
def test_an_empty_inputs_file_names_the_fix(tmp_path: Path, name: str, content: bytes) -> None:
    (tmp_path / name).write_bytes(content)
    proc = run_cli("check", USER, "--inputs", str(tmp_path / name), "--runs", "0")
    _one_error(proc, "is empty (0 bytes); give a .safetensors file")
    assert "()" not in proc.stderr


@pytest.mark.parametrize("variants", ["", ","])
def test_bench_variants_naming_none_is_exit_2(variants: str) -> None:
    """An empty --variants used to run the default list, as if the flag were left out."""
    _one_error(run_cli("bench", USER, "--variants", variants), "names no variant")


def test_an_unknown_hugging_face_model_type_names_the_fix(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "nosuchmodel"}))
    _one_error(
        run_cli("check", str(tmp_path), "--runs", "0"), "`nosuchmodel`", "check its config.json"
    )


def test_an_onnx_opset_torch_cannot_write_is_exit_2_and_writes_nothing(tmp_path: Path) -> None:
    """torch.onnx keeps opset 18 when it cannot convert to the one asked for, and says so
    only in a log line: ``--opset 99`` used to write an opset-18 file, exit 0."""
    out = tmp_path / "tiny.onnx"
    proc = run_cli("export", TINY, "-o", str(out), "--opset", "99", "--runs", "0")
    _one_error(proc, "cannot write opset 99 (it would write opset 18)", "pass a lower opset")
    assert list(tmp_path.iterdir()) == []


def test_a_hugging_face_directory_with_broken_weights_is_exit_2(tmp_path: Path) -> None:
    """transformers' SafetensorError (a truncated file) and torch.load's UnpicklingError (a
    .bin that holds objects) used to be internal errors, exit 3."""
    folder = save_hf("gpt2", tmp_path)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    _one_error(run_cli("check", str(folder), "--runs", "0"), "Error while deserializing header")
    weights.unlink()
    ran = tmp_path / "ran"
    torch.save({"w": _RunsCode(str(ran))}, folder / "pytorch_model.bin")
    proc = run_cli("check", str(folder), "--runs", "0")
    _one_error(proc, "refusing to unpickle the weights in", "convert them to safetensors")
    assert not ran.exists()


class _RunsCode:
    """Unpickled, it creates a file: the proof that a loader ran code from data."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[object, ...]:
        return (open, (self.path, "w"))


@pytest.mark.parametrize("size", ["banana", "0", "-5GB", "GB"])
def test_a_bad_max_shard_size_is_exit_2_before_converting(tmp_path: Path, size: str) -> None:
    """It used to reach save_pretrained after the conversion: an internal error, exit 3."""
    out = tmp_path / "out"
    proc = run_cli(
        "convert", str(save_hf("gpt2", tmp_path)), "-o", str(out), "--max-shard-size", size
    )
    _one_error(proc, f"{size!r} is not a size; write e.g. 5GB")
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["gpt2"]


def test_a_max_shard_size_in_bytes_is_taken(tmp_path: Path) -> None:
    """save_pretrained reads a str as NUMBER+unit: '2000000' used to fail after converting."""
    out = tmp_path / "out"
    proc = run_cli(
        "convert", str(save_hf("gpt2", tmp_path)), "-o", str(out), "--max-shard-size", "2000000"
    )
    assert proc.returncode == 0, proc.stderr
    assert (out / "model.safetensors").is_file()


def test_convert_does_not_write_over_its_own_weights_file(tmp_path: Path) -> None:
    """``--weights w.safetensors -o w.safetensors`` used to replace the fp32 file by its
    half copy, exit 0: the fp32 weights were gone."""
    from fixtures.user_model import build

    weights = tmp_path / "w.safetensors"
    save_file(build().state_dict(), str(weights))
    before = weights.read_bytes()
    proc = run_cli("convert", USER, "--weights", str(weights), "-o", str(weights))
    _one_error(proc, "is the --weights file", "write it to another path")
    assert weights.read_bytes() == before and list(tmp_path.iterdir()) == [weights]


@pytest.mark.parametrize(
    "text",
    [
        "[" * 100_000 + "]" * 100_000,  # json's decoder recurses: RecursionError
        '{"format": "halfprec-recipe/1", "fp32_params_up_to": ' + "9" * 5000 + "}",
    ],
    ids=["nested", "huge-int"],
)
def test_a_recipe_json_decoder_error_is_exit_2(tmp_path: Path, text: str) -> None:
    """Python's JSON decoder raises RecursionError and a plain ValueError (not
    JSONDecodeError) on these: they used to be internal errors, exit 3."""
    recipe = tmp_path / "recipe.json"
    recipe.write_text(text)
    _one_error(run_cli("check", USER, "--recipe", str(recipe), "--runs", "0"), "not valid JSON")
    (tmp_path / "config.json").write_text(text)
    _one_error(run_cli("check", str(tmp_path), "--runs", "0"), "config.json is not valid JSON")


def test_inputs_nested_too_deep_are_exit_2(tmp_path: Path) -> None:
    """Every walk over the inputs recurses: 2000 nested lists used to be a RecursionError."""
    nested: list[object] = [torch.zeros(1)]
    for _ in range(2000):
        nested = [nested]
    path = tmp_path / "deep.pt"
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)  # pickling it recurses too
    try:
        torch.save(nested, path)
    finally:
        sys.setrecursionlimit(limit)
    proc = run_cli("check", USER, "--inputs", str(path), "--runs", "0")
    _one_error(proc, "nests lists, tuples or dicts more than 32 deep")


def test_export_does_not_write_over_its_inputs_or_model(tmp_path: Path) -> None:
    """``export -o x.pt --inputs x.pt`` (TorchScript output) replaced the inputs file."""
    inputs = tmp_path / "x.pt"
    torch.save(example_inputs(), inputs)
    before = inputs.read_bytes()
    proc = run_cli("export", TINY, "-o", str(inputs), "--inputs", str(inputs))
    _one_error(proc, "is the --inputs file", "write it to another path")
    scripted = tmp_path / "model.ts"
    torch.jit.save(torch.jit.trace(tiny(), example_inputs()[0], strict=False), str(scripted))
    model_bytes = scripted.read_bytes()
    _one_error(run_cli("export", str(scripted), "-o", str(scripted)), "is the MODEL file")
    assert inputs.read_bytes() == before and scripted.read_bytes() == model_bytes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.ts", "x.pt"]


# -- issue 32: special files, lying files and the last tracebacks ----------------------


@pytest.mark.parametrize(
    ("option", "role"),
    [("--inputs", "inputs file"), ("--recipe", "recipe file"), ("--weights", "checkpoint")],
)
def test_a_fifo_given_as_a_file_is_named_as_one(tmp_path: Path, option: str, role: str) -> None:
    pipe = fifo(tmp_path / "pipe.safetensors")  # used to say "not found"
    proc = within(30, lambda: run_cli("check", USER, option, str(pipe), "--runs", "0"), pipe)
    _one_error(proc, f"{role} {pipe} is a FIFO (named pipe), not a regular file")


def test_a_recipe_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    recipe = tmp_path / "r.json"
    text = halfprec.Recipe(dtype="fp16").dumps()
    recipe.write_bytes(b"\xef\xbb\xbf" + text.encode())  # as Notepad saves UTF-8
    out = tmp_path / "half.safetensors"
    proc = run_cli("convert", USER, "--recipe", str(recipe), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    from halfprec.io.checkpoint import read_metadata

    assert read_metadata(out)["dtype"] == "fp16"


def test_a_recipe_with_info_nested_700_deep_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    data = halfprec.Recipe(dtype="fp16").to_json()
    info: dict[str, object] = {}
    data["info"] = info
    for _ in range(700):
        info["a"] = {}
        info = info["a"]  # type: ignore[assignment]
    recipe = tmp_path / "deep.json"
    recipe.write_text(json.dumps(data))
    out = tmp_path / "half.safetensors"
    proc = run_cli("convert", USER, "--recipe", str(recipe), "-o", str(out), "--json")
    _one_error(proc, "Recipe.info nests lists and objects more than 16 deep")
    assert not out.exists()  # used to be a RecursionError after writing the output


def test_an_inputs_shape_past_int64_is_exit_2(tmp_path: Path) -> None:
    header = json.dumps({"x": {"dtype": "F32", "shape": [0, 2**63], "data_offsets": [0, 0]}})
    bad = tmp_path / "inputs.safetensors"
    bad.write_bytes(len(header).to_bytes(8, "little") + header.encode())
    _one_error(
        run_cli("check", USER, "--inputs", str(bad), "--runs", "0"),
        "has shape [0, 9223372036854775808], not a list of sizes from 0 to 2**63 - 1",
    )


def test_checkpoint_metadata_without_its_dtype_is_exit_2(tmp_path: Path) -> None:
    good = tmp_path / "good.safetensors"
    assert run_cli("convert", USER, "-o", str(good), "--dtype", "fp16").returncode == 0
    from safetensors import safe_open

    with safe_open(str(good), framework="pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
        meta = {k: v for k, v in f.metadata().items() if k != "dtype"}
    bad = tmp_path / "bad.safetensors"
    save_file(tensors, str(bad), metadata=meta)
    _one_error(
        run_cli("check", USER, "--weights", str(bad), "--runs", "0"),
        "its metadata has no dtype field",
    )


@pytest.mark.parametrize("index", [{"weight_map": []}, {"weight_map": 3}, {"weight_map": None}, []])
def test_an_index_of_the_wrong_shape_is_exit_2(tmp_path: Path, index: object) -> None:
    from fixtures.user_model import build

    folder = tmp_path / "weights"
    folder.mkdir()
    save_file(build().state_dict(), str(folder / "a.safetensors"))
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    out = tmp_path / "half.safetensors"
    proc = run_cli("convert", USER, "--weights", str(folder), "-o", str(out))
    _one_error(proc, "is not a safetensors index")  # used to be an AttributeError
    assert not out.exists()


def test_a_fifo_shard_is_exit_2_not_a_hang(tmp_path: Path) -> None:
    from fixtures.user_model import build

    folder = tmp_path / "weights"
    folder.mkdir()
    state = build().state_dict()
    save_file({k: v for k, v in state.items() if k != "head.bias"}, str(folder / "a.safetensors"))
    pipe = fifo(folder / "b.safetensors")
    weight_map = {k: "a.safetensors" for k in state}
    weight_map["head.bias"] = "b.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    out = tmp_path / "half.safetensors"
    cmd = ("convert", USER, "--weights", str(folder), "-o", str(out))
    proc = within(30, lambda: run_cli(*cmd), pipe)
    _one_error(proc, "b.safetensors is a FIFO (named pipe)")
    assert not out.exists()


def test_generate_past_the_model_s_positions_is_exit_2(tmp_path: Path) -> None:
    from testbed.hf_tiny import build

    short = tmp_path / "gpt2-40"
    build("gpt2", context=40).save_pretrained(str(short))
    proc = run_cli("check", str(short), "--generate", "64", "--runs", "0")
    _one_error(proc, "positions, but GPT2LMHeadModel takes 40", "use --generate")


def test_a_batch_size_past_the_limit_is_exit_2() -> None:
    proc = run_cli("bench", USER, "--batch-sizes", "1,1000000000000")
    _one_error(proc, "--batch-sizes 1000000000000 is over the largest batch")


# -- a bad data file or model folder: the one line names the fix too ------------------------


def test_an_unreadable_weights_file_names_what_to_give_instead(tmp_path: Path) -> None:
    text = tmp_path / "weights.pt"
    text.write_text("hello\n")
    _one_error(
        run_cli("check", USER, "--weights", str(text), "--runs", "0"),
        "weights.pt is corrupt or not a torch checkpoint",
        "give weights written by torch.save(model.state_dict(), path) or a .safetensors file",
    )
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(b"\x00garbage" * 10)
    _one_error(
        run_cli("check", USER, "--weights", str(cut), "--runs", "0"),
        "cut.safetensors is not a valid safetensors file",
        "truncated or corrupt: copy or write it again",
    )


def test_a_folder_of_weights_without_config_names_the_two_ways_out(tmp_path: Path) -> None:
    folder = save_hf("gpt2", tmp_path)
    (folder / "config.json").unlink()
    _one_error(
        run_cli("check", str(folder), "--runs", "0"),
        "holds weights (model.safetensors) but no config.json",
        "add the model's config.json, or give a MODEL spec that builds the model and "
        f"--weights {folder / 'model.safetensors'}",
    )


def test_a_config_without_weights_says_so(tmp_path: Path) -> None:
    folder = save_hf("gpt2", tmp_path)
    (folder / "model.safetensors").unlink()
    _one_error(
        run_cli("check", str(folder), "--runs", "0"),
        "has config.json but no weights file (model.safetensors or pytorch_model.bin)",
        "model.save_pretrained",
    )


def test_an_older_sentence_transformers_folder_names_its_transformer(tmp_path: Path) -> None:
    """modules.json with the transformer in 0_Transformer/ (an older layout): no config.json
    at the top, and the one line names the subfolder to give instead."""
    folder = tmp_path / "st"
    save_hf("gpt2", folder).rename(folder / "0_Transformer")
    entry = {"idx": 0, "name": "0", "path": "0_Transformer"}
    modules = [{**entry, "type": "sentence_transformers.models.Transformer"}]
    (folder / "modules.json").write_text(json.dumps(modules))
    _one_error(
        run_cli("check", str(folder), "--runs", "0"),
        "its subfolder '0_Transformer'",
        f"give {folder / '0_Transformer'} as MODEL",
    )
