"""report.diagnose: a diagnosis renders as JSON, a table and a plot."""

from __future__ import annotations

import json
import math

from halfprec import diagnose
from halfprec.report.diagnose import diagnosis_table, plot_diagnosis
from testbed.hazards import HAZARDS


def test_json_table_and_plot(tmp_path) -> None:  # type: ignore[no-untyped-def]
    model, batches = HAZARDS["eps-1e-12"].build()
    diag = diagnose(model, batches, "fp16")
    data = json.loads(json.dumps(diag.to_json(), default=str))
    assert data["divergence"]["culprit"] == "norm"
    assert {m["name"] for m in data["modules"]} >= {"norm", "body.0", "head"}
    norm = next(m for m in data["modules"] if m["name"] == "norm")
    assert math.isinf(norm["local_error"]) and "inf/nan" in norm["flags"]
    table = diagnosis_table(diag, top=3)
    assert table.row_count == 3
    png = tmp_path / "diag.png"
    plot_diagnosis(diag, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
