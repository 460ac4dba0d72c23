"""halfprec.export.check_artifact: an exported file against its fp32 model, as a library call."""

from __future__ import annotations

from pathlib import Path

import halfprec
from halfprec.export import check_artifact
from support.export_models import example_inputs, tiny


def test_check_artifact_judges_by_the_explicit_tolerance_else_the_recipe_s(
    tmp_path: Path,
) -> None:
    model, batches = tiny(), example_inputs()
    path = tmp_path / "tiny.pt2"
    assert halfprec.export(model, batches, path, "fp16").passed
    before = [(n, p.clone()) for n, p in model.named_parameters()]
    plain = check_artifact(path, model, batches, name="tiny")
    assert plain.passed and plain.model == "tiny" and plain.to_json()["artifact"] == str(path)
    strict = halfprec.Recipe(dtype="fp16", tolerance=halfprec.Tolerance(min_sqnr_db=200))
    judged = check_artifact(path, model, batches, strict)
    assert not judged.passed and "SQNR" in judged.comparison.reason
    loose = halfprec.Tolerance(min_sqnr_db=10)
    assert check_artifact(path, model, batches, strict, tolerance=loose).passed
    # the caller's model is left as it was
    assert all(p.equal(q) for (_, p), (_, q) in zip(model.named_parameters(), before, strict=True))
