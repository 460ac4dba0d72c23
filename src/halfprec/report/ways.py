"""The ways of running a model (:data:`halfprec.bench.ways.WAYS`) as text, one block each:
what ``halfprec bench --list-variants`` prints."""

from __future__ import annotations

from collections.abc import Iterable

from halfprec.bench.ways import Way
from halfprec.dtypes import dtype_name


def _facts(way: Way) -> str:
    """What bench and deploy do with ``way``, in a few words."""
    facts = [
        "run by torch" if not way.runtime else f"run by {way.runs_in}",
        "+compile" if way.compilable else "not compiled",
        "built from an example batch" if way.needs_batch else "built from the model",
        _chosen(way),
    ]
    return "; ".join(facts)


def _chosen(way: Way) -> str:
    if way.choosable:
        return "deploy may choose it"
    if way.runtime:
        return "deploy may choose it over the torch choice when faster by its spread"
    return "timed beside the others, never chosen"


def ways_text(ways: Iterable[Way]) -> str:
    """Each way: its variant names, then its summary, its facts and how it is saved."""
    blocks = []
    for way in ways:
        names = (
            "fp32"
            if way.name == "fp32"
            else ", ".join(f"{way.name}-{dtype_name(d)}" for d in way.dtypes)
        )
        blocks.append(f"{names}\n  {way.summary}\n  {_facts(way)}\n  saved: {way.saving}")
    return "\n".join(blocks)
