"""Runtime cost of one op island on MiniLM-L6 (transformers config, random weights), and
whether saturating fills cost anything there.

    PYTHONPATH=src python benchmarks/op_islands.py [--dtype fp16] [--seq 128] [--reps 15]

Converts the model twice, without and with one op island (the attention op of
``encoder.layer.0.attention.self``'s own code), times both interleaved after a warm-up
(median of ``--reps`` calls each, so that load from other processes hits both alike) and
prints the ratio with / without.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from transformers import BertConfig, BertModel

from halfprec import Recipe, convert
from halfprec.convert import conversion_report, recipe_of
from halfprec.convert.op_islands import OpRef, own_op, recording_ordinals, with_ordinals
from halfprec.timing import now

TARGET = "encoder.layer.0.attention.self"
_COMPUTE = ("scaled_dot_product_attention", "matmul", "softmax")


class _FirstOwnOp(TorchFunctionMode):
    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__()
        self.module, self.found = module, []  # type: ignore[var-annotated]

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        name = getattr(func, "__name__", "")
        where = None if name.startswith("_") else own_op(sys._getframe(1), self.module)
        if where is not None:
            self.found.append((name, where))
        return func(*args, **(kwargs or {}))


def _batch(seq: int) -> dict[str, Any]:
    ids = torch.randint(0, 20000, (8, seq), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[::2, seq * 3 // 4 :] = 0
    return {"input_ids": ids, "attention_mask": mask}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    torch.manual_seed(0)
    config = BertConfig(
        hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536
    )
    model = BertModel(config).eval()
    batch = _batch(args.seq)
    target = dict(model.named_modules())[TARGET]
    probe = _FirstOwnOp(target)
    handles = [
        target.register_forward_pre_hook(lambda m, a: [probe.__enter__(), None][1]),
        target.register_forward_hook(lambda m, a, o: probe.__exit__(None, None, None)),
    ]
    with torch.no_grad():
        model(**batch)
    for h in handles:
        h.remove()
    compute = [f for f in probe.found if f[0] in _COMPUTE]
    op, location = (compute or probe.found)[0]
    ref = OpRef(TARGET, op, location, 0)
    plain = convert(model, args.dtype)
    dtype = conversion_report(plain).dtype  # type: ignore[union-attr]
    located = convert(model, Recipe(dtype, op_islands=(ref,)))
    with recording_ordinals() as seen, torch.no_grad():
        located(**batch)  # the island found by its ordinal: no frames walked while timing
    island = convert(
        model,
        recipe_of(located).replace(  # type: ignore[union-attr]
            op_islands=with_ordinals((ref,), seen)
        ),
    )
    for m in (plain, island):
        report = conversion_report(m)
        assert report is not None
    print(f"op island: {ref}; fill guards: {conversion_report(plain).fill_guards}")  # type: ignore[union-attr]
    times: dict[str, list[float]] = {"without": [], "with": []}
    with torch.inference_mode():
        for m in (plain, island):
            m(**batch)
        for _ in range(args.reps):
            for key, m in (("without", plain), ("with", island)):
                start = now()
                m(**batch)
                times[key].append(now() - start)
    a, b = statistics.median(times["without"]), statistics.median(times["with"])
    print(
        f"MiniLM-L6 {args.dtype} batch 8 x {args.seq}: without {1e3 * a:.1f} ms, "
        f"with one op island {1e3 * b:.1f} ms, ratio {b / a:.3f}"
    )


if __name__ == "__main__":
    main()
