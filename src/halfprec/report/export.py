"""Rendering of export results: what was written, how it compares, and onnxruntime's view."""

from __future__ import annotations

from rich.console import Console

from halfprec.compare import Comparison
from halfprec.export import Artifact, ExportResult
from halfprec.report.common import (
    comparison_table,
    fit_table,
    fmt_float,
    human_bytes,
    human_time,
    make_console,
)
from halfprec.timing import ratio_text


def _verdict(con: Console, cmp: Comparison, what: str) -> None:
    if cmp.passed:
        con.print(f"[green]PASS[/]: {what} matches fp32 within tolerance ({cmp.reason})")
    else:
        con.print(f"[red]FAIL[/]: {what} against fp32: {cmp.reason}")
    con.print(f"  reference: {cmp.reference}")


def print_export(result: ExportResult) -> None:
    for companion in result.companions:  # written first (an encoder-decoder's encoder)
        print_export(companion)
    con = make_console()
    info = result.info
    con.print(
        f"wrote {result.path} ({info.format}, {info.dtype} weights, {info.io_dtype} inputs "
        f"and outputs, {human_bytes(result.bytes_written)}; fp32 parameters were "
        f"{human_bytes(result.conversion.bytes_before)})"
    )
    con.print(f"  fp32 islands kept in the file: {len(info.islands)}")
    skipped = f", {result.skipped_batches} skipped (fixed shapes)" if result.skipped_batches else ""
    con.print(
        f"  reloaded and ran on {result.checked_batches} example batches{skipped}; largest "
        f"difference from the in-Python half model: {fmt_float(result.python_max_abs)}"
    )
    for note in result.notes:
        con.print(f"  note: {note}")
    title = "fp32 PyTorch vs the exported file"
    con.print(fit_table(comparison_table(result.comparison, title=title), con))
    for problem in result.comparison.problems:
        con.print(f"  [red]problem[/]: {problem}")
    casts = result.ort_casts
    if casts is not None:
        fallback = ", ".join(f"{op} x{n}" for op, n in casts.fp32_fallback_ops.items()) or "none"
        con.print(
            f"onnxruntime CPU: {casts.casts_in_file} Cast nodes in the file (IO and islands); "
            f"onnxruntime inserted {casts.casts_inserted} more to run fp16 nodes it has no "
            f"CPU kernel for in fp32 ({fallback})"
        )
    lat = result.ort_latency
    if lat is not None:
        con.print(
            f"onnxruntime CPU latency: fp32 {human_time(lat.fp32.median)}, {lat.dtype} "
            f"{human_time(lat.half.median)} ({ratio_text(lat.speedup)}); fp32 file "
            f"{human_bytes(lat.bytes_fp32)}"
        )
    _verdict(con, result.comparison, "the exported file")


def print_artifact_check(artifact: Artifact, comparison: Comparison, skipped: int) -> None:
    con = make_console()
    info = artifact.info
    con.print(
        f"{artifact.path}: {info.format}, {info.dtype} weights, {info.io_dtype} IO, exported "
        f"from {info.model or 'an unnamed model'} by halfprec {info.halfprec or '?'}"
    )
    if skipped:
        con.print(f"  {skipped} example batches skipped: their shapes differ from the file's")
    con.print(fit_table(comparison_table(comparison, title="fp32 PyTorch vs the artifact"), con))
    for problem in comparison.problems:
        con.print(f"  [red]problem[/]: {problem}")
    _verdict(con, comparison, "the artifact")
