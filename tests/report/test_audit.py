"""report.audit: an audit report renders as a table and round-trips through JSON."""

from __future__ import annotations

import json

from halfprec import audit
from halfprec.report.audit import render_table
from support.leaky import load_leaky


def test_report_renders_table_and_json() -> None:
    from rich.console import Console

    leaky = load_leaky()
    report = audit(leaky.RangeLeak(), leaky.SUITE["RangeLeak"][1](), "fp16")
    console = Console(record=True, width=200)
    render_table(report, console)
    text = console.export_text()
    assert "leaky.py:" in text and "range" in text and "torch.finfo(x.dtype).min" in text
    data = json.loads(json.dumps(report.to_json()))
    assert data["dtype"] == "fp16" and data["count"] == 2
    assert data["leaks"][0]["code"] == "h = h.masked_fill(mask, -1e9)  # leak: range"
