"""What the default op policy costs, in instructions per forward: counted by callgrind, so
no other job on a shared machine changes them (timings there drift by a few percent).

The model has MiniLM's code and calls (a transformers BERT plus mean pooling, batch 1 x
16 tokens) but tiny widths (hidden 24, 12 heads), so that nearly all of a forward is
Python: the instructions a variant adds to naive ``.to(bf16)`` are its Python overhead,
which a real MiniLM forward pays too. Variants: naive, naive under an empty
TorchFunctionMode (the floor of any Python mode), convert without the op policy, convert
defaults. Run it under callgrind with instrumentation off at the start (the script turns
it on around each variant's forwards through callgrind's client requests, from a small C
helper it compiles with ``cc`` against ``valgrind/callgrind.h``) and the same output
prefix::

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONPATH=src valgrind --tool=callgrind \\
        --instr-atstart=no --callgrind-out-file=/tmp/opcg.%p \\
        python3 benchmarks/archive/op_policy_instructions.py --out /tmp/opcg [--forwards 5]

(``python3`` must be the interpreter itself, not a shell shim such as pyenv's.)
"""

from __future__ import annotations

import argparse
import copy
import ctypes
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

import halfprec
from halfprec.batch import call
from halfprec.io.zoo import SentenceEncoder, import_transformers, minilm_path

_HELPER = """
#include <valgrind/callgrind.h>
int cg_running(void) { return RUNNING_ON_VALGRIND; }
void cg_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void cg_zero(void) { CALLGRIND_ZERO_STATS; }
void cg_dump(const char *s) { CALLGRIND_DUMP_STATS_AT(s); }
"""


class _Empty(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        return func(*args, **kwargs) if kwargs else func(*args)


def _helper(where: Path) -> ctypes.CDLL:
    (where / "cg.c").write_text(_HELPER)
    out = where / "libcg.so"
    subprocess.run(
        ["cc", "-O1", "-shared", "-fPIC", "-o", str(out), str(where / "cg.c")], check=True
    )
    return ctypes.CDLL(str(out))


def _variants() -> tuple[dict[str, Callable[[Any], Any]], dict[str, torch.Tensor]]:
    tf = import_transformers()
    config = tf.AutoConfig.from_pretrained(minilm_path())
    config.hidden_size, config.intermediate_size, config.num_attention_heads = 24, 48, 12
    torch.manual_seed(0)
    model = SentenceEncoder(tf.BertModel(config)).eval()
    ids = torch.randint(0, 1000, (1, 16))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    dtype = torch.bfloat16
    naive = copy.deepcopy(model).to(dtype)
    off = halfprec.convert(model, halfprec.Recipe(dtype, fp32_ops=(), fp32_inputs=False))
    default = halfprec.convert(model, dtype)

    def naive_empty(b: Any) -> Any:
        with _Empty():
            return call(naive, b)

    variants = {
        "naive": lambda b: call(naive, b),
        "naive under an empty TorchFunctionMode": naive_empty,
        "convert, no op policy": lambda b: call(off, b),
        "convert (default)": lambda b: call(default, b),
    }
    return variants, batch


def _summary(path: Path) -> int:
    for line in path.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise SystemExit(f"op_policy_instructions: no summary line in {path}")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", required=True, help="callgrind's --callgrind-out-file prefix")
    parser.add_argument("--forwards", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cg = _helper(Path(tmp))
        if not cg.cg_running():
            print("op_policy_instructions: not under valgrind; see the usage", file=sys.stderr)
            return 2
        variants, batch = _variants()
        with torch.inference_mode():
            for fn in variants.values():
                for _ in range(3):
                    fn(batch)  # warm-up: caches, lazy imports
            cg.cg_start()
            for name, fn in variants.items():
                cg.cg_zero()
                for _ in range(args.forwards):
                    fn(batch)
                cg.cg_dump(name.encode())
    counts = [_summary(Path(f"{args.out}.{os.getpid()}.{i}")) / args.forwards for i in (1, 2, 3, 4)]
    print("| variant | instructions per forward | over naive |")
    print("|---|---|---|")
    for name, count in zip(variants, counts, strict=True):
        print(f"| {name} | {count / 1e6:.2f} M | +{(count - counts[0]) / 1e6:.2f} M |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
